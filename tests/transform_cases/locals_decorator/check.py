"""The decorator form adds no local variable: locals() is what it was."""


def check(before, after, otel, exporter):
    assert after.snapshot(3, 0.5) == before.snapshot(3, 0.5) == {"step": 3, "loss": 0.5}
    (span,) = exporter.get_finished_spans()
    assert span.name == "demo.snapshot" and span.attributes["demo.step"] == 3
    otel.disable()
    assert after.snapshot(4, 1.0) == {"step": 4, "loss": 1.0}
