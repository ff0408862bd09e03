"""The module's own otel is untouched: its functions read it, the spans are the runtime's."""


def check(before, after, otel, exporter):
    assert after.count(2) == before.count(2) == 2
    assert after.doubled(5) == before.doubled(5) == 11
    assert after.Holder.decorated(4) == 3 and after.Holder.otel == "attribute"
    assert after.otel == {"calls": 2} and after._otel is otel
    spans = sorted(s.name for s in exporter.get_finished_spans())
    assert spans == ["demo.count", "demo.decorated", "demo.doubled"]
    after.clear()
    assert after.otel == {"calls": 0}
    # its own otel.reset(), otel.setdefault() and otel.get(), beside the hook's _otel.reset()
    assert after.total("steps") == before.total("steps") == 0
    assert after.otel == {"steps": 0}
