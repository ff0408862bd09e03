"""Bind a stream span's ``stream:`` to the one call, inside the covered statements, whose returned
(async) iterable the span is handed over to."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
from libcst.helpers import get_full_name_for_node

from codegen.diagnostics import Diagnostics
from codegen.resolve.regions import select
from codegen.resolve.sites import StreamSite
from codegen.resolve.statements import block_ancestry, statement_sites
from codegen.resolve.walk import children
from codegen.spec.model import Span

# Where a call may run several times, or later, or never, for one run of the covered statements.
_ELSEWHERE = (
    cst.FunctionDef,
    cst.Lambda,
    cst.ClassDef,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
)


def resolve_stream(
    span: Span,
    func: cst.FunctionDef,
    block: cst.IndentedBlock,
    start: int,
    end: int,
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> StreamSite | None:
    """The call ``span.stream`` selects, or None (reported): exactly one call of that name in the
    selected statement, which lies among the covered statements ``block.body[start:end]``, made
    once per run of them (not in a loop, a comprehension, a lambda or a nested def)."""
    selector = span.stream
    assert selector is not None
    site = select(span, selector, statement_sites(func), line_of, diags)
    if site is None:
        return None
    covered = block.body[start:end]
    inside = (site.block is block and start <= site.index < end) or any(
        b == id(block) and start <= i < end for b, i in block_ancestry(func).get(id(site.block), ())
    )
    if not inside:
        diags.error(
            selector.pos,
            f"the stream call on line {line_of(site.node)} is outside the span's covered statements "
            f"(lines {line_of(covered[0])}-{line_of(covered[-1])})",
        )
        return None
    entered = False
    for ancestor in site.ancestors:
        entered = entered or any(ancestor is s for s in covered)
        if entered and isinstance(ancestor, (cst.For, cst.While)):
            diags.error(
                selector.pos,
                f"the stream call on line {line_of(site.node)} is in a loop (line {line_of(ancestor)}): "
                "the span would be handed over to several streams",
            )
            return None
    calls: list[tuple[cst.Call, bool]] = []  # (call, made elsewhere)
    stack: list[tuple[cst.CSTNode, bool]] = [(site.node, False)]
    while stack:
        node, elsewhere = stack.pop()
        if isinstance(node, cst.Call) and get_full_name_for_node(node.func) == selector.value:
            calls.append((node, elsewhere))
        inner = elsewhere or (node is not site.node and isinstance(node, _ELSEWHERE))
        stack.extend((child, inner) for child in children(node))
    if len(calls) != 1:
        diags.error(
            selector.pos,
            f"line {line_of(site.node)} calls {selector.value} {len(calls)} times; stream needs one",
        )
        return None
    call, elsewhere = calls[0]
    if elsewhere:
        diags.error(
            selector.pos,
            f"the stream call on line {line_of(call)} is inside a lambda, comprehension or nested "
            "def: it may run several times, or after the span's statements",
        )
        return None
    if not isinstance(site.block, cst.IndentedBlock):
        diags.error(selector.pos, "cannot rewrite a statement of a one-line block")
        return None
    return StreamSite(site.block, site.node, call)
