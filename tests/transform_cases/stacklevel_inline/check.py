"""The inline form keeps the function's frame: a stacklevel=2 warning still names this caller, and
sys._getframe(1) still sees it."""

import warnings


def check(before, after, otel, exporter):
    for module in (before, after):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module.load("ckpt")
            module.legacy("ckpt")
        assert [w.filename for w in caught] == [__file__, __file__], [str(w) for w in caught]
        assert module.where() == "check"
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["demo.legacy", "demo.load", "demo.where"]
