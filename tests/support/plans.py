"""What resolve/ makes of a spec on a source, in a form a test asserts in one line.

``placed(tmp_path, spec, source)`` loads the fixture project with ``spec`` (YAML, as a
``specs/case.yaml``) over ``megatron/demo.py`` holding ``source``, resolves it and gives a
:class:`Placed`: per span (or hook, by its kind and function: ``"statement a"``), the source lines its statements cover, the
function decorated, the statement a hook call goes before, and the error messages of each entry
that failed. Only resolve/ runs: nothing is transformed or written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codegen.diagnostics import Diagnostics
from codegen.resolve.plan import resolve
from codegen.spec.load import load_project
from codegen.spec.model import AroundHook, EntryHook, Hook, Span, StatementHook, WrapHook
from tests.generator.support import DEMO, make_project


@dataclass
class Placed:
    # span name (or a hook's label) -> the source lines (first, last; 1-based) its wrap covers
    wraps: dict[str, tuple[int, int]] = field(default_factory=dict)
    # span name -> the decorated function's name
    decorated: dict[str, str] = field(default_factory=dict)
    # hook label -> the line of the statement its call is inserted before (the block's last line + 1
    # at its end)
    inserts: dict[str, int] = field(default_factory=dict)
    # hook label -> the line of the call it wraps
    rewrites: dict[str, int] = field(default_factory=dict)
    # entry label -> its error messages
    errors: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


_KINDS = {EntryHook: "entry", StatementHook: "statement", AroundHook: "around", WrapHook: "wrap"}


def label(entry: Span | Hook) -> str:
    """A span's name; a hook's kind and function: ``"statement a"``, ``"around C.method"``."""
    if isinstance(entry, Span):
        return entry.name
    return f"{_KINDS[type(entry)]} {entry.function}"


def span_spec(function: str, around: str | None = None) -> str:
    """A spec of one span ``demo.s`` (group ``step``) on ``function`` of megatron/demo.py, around
    the statements ``around`` selects (YAML; the whole function when None)."""
    spec = f"file: megatron/demo.py\nspans:\n  - name: demo.s\n    group: step\n    function: {function}\n"
    return spec if around is None else spec + f"    around: {around}\n"


def placed(tmp: Path, spec: str, source: str, extra_sources: dict[str, str] | None = None) -> Placed:
    """resolve/'s plan for ``spec`` over ``megatron/demo.py`` = ``source``, as a :class:`Placed`."""
    specs, root = make_project(tmp, spec, source, extra_sources)
    diags = Diagnostics()
    project = load_project(specs, diags)
    assert not [d for d in diags.items if d.severity == "error"], diags.render()
    resolution = resolve(project, root, diags)
    result = Placed(warnings=[d.message for d in diags.items if d.severity == "warning"])
    for entry, found in resolution.failures():
        result.errors[label(entry)] = [d.message for d in found]
    file_plan = resolution.plan.files.get(DEMO)
    if file_plan is None:
        return result
    positions = MetadataWrapper(file_plan.module, unsafe_skip_copy=True).resolve(PositionProvider)

    def first(node: cst.CSTNode) -> int:
        return positions[node].start.line

    def last(node: cst.CSTNode) -> int:
        return positions[node].end.line

    for wrap in file_plan.wraps:
        body = wrap.block.body
        result.wraps[label(wrap.entry)] = (first(body[wrap.start]), last(body[wrap.end - 1]))
    for span, function in file_plan.decorations:
        result.decorated[span.name] = function.name.value
    for insert in file_plan.inserts:
        body = insert.block.body
        line = first(body[insert.index]) if insert.index < len(body) else last(body[-1]) + 1
        result.inserts[label(insert.hook)] = line
    for rewrite in file_plan.rewrites:
        result.rewrites[label(rewrite.hook)] = first(rewrite.call)
    return result
