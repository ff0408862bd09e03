"""A lambda's own ``_otel`` and ``_otel_span`` are its parameters: the results are the pristine
ones and the span records."""


def check(before, after, otel, exporter):
    assert after.scale([1, 2], 3) == before.scale([1, 2], 3) == [4, 7]
    assert [s.name for s in exporter.get_finished_spans()] == ["demo.scale"]
