"""On an already-instrumented tree the generator changes nothing and documents the same hierarchy."""

from __future__ import annotations

from pathlib import Path

from codegen.atomic import write_files
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
    assert (
        "| `demo.a` |" in first.docs["hierarchy.md"]
        or "- `demo.a`\n  - `demo.b`" in first.docs["hierarchy.md"]
    )
    write_files(root, {path: new for path, (_, new) in first.changes.items()})
    second = generate(specs, root)
    assert second.changes == {}
    assert second.docs == first.docs
    assert "- `demo.a`\n  - `demo.b`" in second.docs["hierarchy.md"]


RENAMED = {
    "demo.a": "demo.a.renamed.to.a.name.long.enough.to.be.split.over.several.string.literals.by.the.layout",
    "demo.b": "demo.b2",
}


def test_renamed_spans_applied_to_an_instrumented_tree_equal_a_fresh_application(tmp_path: Path) -> None:
    """Our own constructs are recognised by their structure, whatever their names: applying
    changed specs to an instrumented tree gives exactly what applying them to the pristine tree
    gives, instead of wrapping the statements a second time."""
    specs, root = make_project(tmp_path / "fork", SPEC, SOURCE)
    write_files(root, {path: new for path, (_, new) in generate(specs, root).changes.items()})
    renamed = SPEC
    for old, new in RENAMED.items():
        renamed = renamed.replace(f"name: {old}\n", f"name: {new}\n")
    (specs / "case.yaml").write_text(renamed, encoding="utf-8")
    fresh_specs, fresh_root = make_project(tmp_path / "fresh", renamed, SOURCE)
    expected = generate(fresh_specs, fresh_root).changes["megatron/demo.py"][1]
    assert generate(specs, root).changes["megatron/demo.py"][1] == expected
    assert expected.count("start_span") == 2


def test_our_constructs_are_recognised_in_any_layout(tmp_path: Path) -> None:
    """A fork whose generated lines were laid out differently (another formatter, a hand edit)
    is still recognised: re-applying gives the canonical output, not a second wrap."""
    specs, root = make_project(tmp_path, SPEC, SOURCE)
    first = generate(specs, root).changes["megatron/demo.py"][1]
    relaid = first
    for old, new in (
        ('otel.start_span("demo.b")', 'otel.start_span(\n            "demo" ".b",\n        )'),
        ("_otel_span = _otel.STEP and", "_otel_span = (_otel.STEP) and"),
        ("_otel_span_2 and _otel_span_2.end()", "(_otel_span_2 and _otel_span_2.end())"),
    ):
        assert old in relaid
        relaid = relaid.replace(old, new)
    compile(relaid, "demo.py", "exec")
    (root / "megatron" / "demo.py").write_text(relaid, encoding="utf-8")
    assert generate(specs, root).changes["megatron/demo.py"][1] == first
