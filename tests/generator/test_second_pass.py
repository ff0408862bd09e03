"""On an already-instrumented tree the generator changes nothing and documents the same hierarchy."""

from __future__ import annotations

from pathlib import Path

from codegen.pipeline import generate
from tests.generator.support import make_project

SPEC = """\
file: megatron/demo.py
spans:
  - name: demo.a
    group: step
    function: f
    form: flat
  - name: demo.b
    group: step
    function: f
    around: {call: h}
"""
SOURCE = """\
def f(g, h, k):
    g()
    try:
        k()
    except ValueError:
        pass
    h()
"""


def test_flat_span_with_a_try_inside_keeps_its_children_on_the_second_pass(tmp_path: Path) -> None:
    specs, root = make_project(tmp_path, SPEC, SOURCE)
    first = generate(specs, root)
    assert "`demo.b` | step" in first.docs["spans.md"]
    assert "| `demo.a` |" in first.docs["hierarchy.md"] or "- `demo.a`\n  - `demo.b`" in first.docs["hierarchy.md"]
    for path, (_, new) in first.changes.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(new, encoding="utf-8")
    second = generate(specs, root)
    assert second.changes == {}
    assert second.docs == first.docs
    assert "- `demo.a`\n  - `demo.b`" in second.docs["hierarchy.md"]
