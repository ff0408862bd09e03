"""The spans of functions defined in ``elif`` branches record when those branches run."""


class _Formatter:
    actions = ("x",)


def check(before, after, otel, exporter):
    mlp_before, mlp_after = before.MLP(), after.MLP()
    for mlp in (mlp_before, mlp_after):
        mlp.fused, mlp.gated = False, True
    assert mlp_after.forward(3) == mlp_before.forward(3) == 6
    assert after.HelpFormatter._format_usage(_Formatter(), None) == "a b"
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["demo.mlp.forward", "demo.mlp.glu", "demo.usage.get_lines"], names
