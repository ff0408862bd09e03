"""A comprehension's own ``_otel`` and ``_otel_span`` are its variables: the results are the
pristine ones and the span records."""


def check(before, after, otel, exporter):
    assert after.total([1, 2, 3]) == before.total([1, 2, 3]) == 14 + 3 + 6
    assert [s.name for s in exporter.get_finished_spans()] == ["demo.total"]
