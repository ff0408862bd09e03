"""Bind a span's region (`around:`) to a contiguous run of statements of one block."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

from codegen.diagnostics import Diagnostics
from codegen.resolve.statements import (
    StatementSite,
    child_blocks,
    first_line_code,
    is_docstring,
    matches,
    statement_sites,
)
from codegen.resolve.walk import walk
from codegen.spec.model import Hook, Region, Selector, Span


def has_docstring(block: cst.IndentedBlock) -> bool:
    if not block.body:
        return False
    return is_docstring(block.body[0])


def resolve_region(
    span: Span | Hook,
    region: Region,
    func: cst.FunctionDef,
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> tuple[cst.IndentedBlock, int, int] | None:
    body = func.body
    assert isinstance(body, cst.IndentedBlock)
    if region.kind == "function":
        start = 1 if has_docstring(body) else 0
        if start >= len(body.body):
            diags.error(span.pos, f"{span.function} has no statements to wrap")
            return None
        return body, start, len(body.body)
    sites = statement_sites(func)
    assert region.first is not None
    first = select(span, region.first, sites, line_of, diags)
    if first is None:
        return None
    if region.kind == "statement":
        return _indented(span, first.block, diags, first.index, first.index + 1)
    if region.kind == "range":
        assert region.last is not None
        last = select(span, region.last, sites, line_of, diags)
        if last is None:
            return None
        if last.block is not first.block or last.index < first.index:
            diags.error(
                region.last.pos,
                f"range end {region.last.describe()} (line {line_of(last.node)}) is not after "
                f"{region.first.describe()} (line {line_of(first.node)}) in the same block",
            )
            return None
        return _indented(span, first.block, diags, first.index, last.index + 1)
    if region.kind == "after":
        if first.index + 1 >= len(_block_body(first.block)):
            diags.error(region.first.pos, f"nothing follows {region.first.describe()} in its block")
            return None
        return _indented(span, first.block, diags, first.index + 1, len(_block_body(first.block)))
    # body / else-body of a compound statement
    stmt = first.node
    if region.branch == "else":
        orelse = getattr(stmt, "orelse", None)
        if not isinstance(orelse, cst.Else):
            diags.error(region.first.pos, f"{region.first.describe()} has no plain 'else:' branch")
            return None
        block = orelse.body
    else:
        assert isinstance(stmt, cst.BaseCompoundStatement)  # a 'body' region's selector is compound
        block = stmt.body
    return _indented(span, block, diags, 0, len(_block_body(block)))


def _block_body(block: cst.BaseSuite) -> tuple[cst.CSTNode, ...]:
    return tuple(block.body)


def _indented(
    span: Span | Hook, block: cst.BaseSuite, diags: Diagnostics, start: int, end: int
) -> tuple[cst.IndentedBlock, int, int] | None:
    if not isinstance(block, cst.IndentedBlock):
        diags.error(span.pos, "cannot wrap statements of a one-line block; the block must be indented")
        return None
    return block, start, end


def select(
    span: Span | Hook,
    selector: Selector,
    sites: list[StatementSite],
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> StatementSite | None:
    pool = sites
    if selector.within is not None:
        owner = select(span, selector.within, sites, line_of, diags)
        if owner is None:
            return None
        pool = [s for s in sites if owner.node in s.ancestors]
    found = [s for s in pool if matches(selector, s)]
    scope = f"{span.function}" + (f" within {selector.within.describe()}" if selector.within else "")
    if selector.occurrence is not None:
        if selector.occurrence > len(found):
            diags.error(
                selector.pos,
                f"selector {selector.describe()} asks for occurrence {selector.occurrence} but "
                f"{scope} has {len(found)} matching statement(s)",
                _candidates(found, line_of),
            )
            return None
        return found[selector.occurrence - 1]
    if not found:
        one_line = [s for s in pool if _in_one_line_body(selector, s)]
        if one_line:
            what = "call it" if selector.kind == "call" else f"{selector.kind} it"
            diags.error(
                selector.pos,
                f"selector {selector.describe()} matches no statement in {span.function} ({span.file}): one-line "
                f"bodies cannot be selected (a {selector.kind} there has no line of its own to wrap); put "
                "the body on its own indented line",
                [f"one-line bodies that {what}:"] + _candidates(one_line, line_of),
            )
            return None
        near = [s for s in sites if _near_miss(selector, s)]
        notes = ["statements of the same kind:"] + _candidates(near, line_of) if near else []
        diags.error(selector.pos, f"selector {selector.describe()} matches no statement in {scope}", notes)
        return None
    if len(found) > 1:
        diags.error(
            selector.pos,
            f"selector {selector.describe()} matches {len(found)} statements in {scope}; "
            "narrow it with 'within' or 'occurrence'",
            _candidates(found, line_of),
        )
        return None
    return found[0]


def _in_one_line_body(selector: Selector, site: StatementSite) -> bool:
    """Whether ``site`` is a compound statement with a one-line body (``if x: foo()``) holding
    what ``selector`` looks for: statements there are not selectable."""
    if not isinstance(site.node, cst.BaseCompoundStatement):
        return False
    for block in child_blocks(site.node):
        if isinstance(block, cst.SimpleStatementSuite):
            line = cst.SimpleStatementLine(body=block.body)
            probe = StatementSite(line, block, 0, ())
            if matches(selector, probe):
                return True
    return False


def _near_miss(selector: Selector, site: StatementSite) -> bool:
    if selector.kind in ("call", "assign"):
        return False
    return type(site.node).__name__.lower() == selector.kind


def _candidates(sites: list[StatementSite], line_of: Callable[[cst.CSTNode], int]) -> list[str]:
    return [f"line {line_of(s.node)}: {first_line_code(s.node)}" for s in sites[:12]]


def parameters(func: cst.FunctionDef) -> set[str]:
    params = func.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            every.append(star)
    return {p.name.value for p in every}


def early_exit(stmts: Sequence[cst.BaseStatement], line_of: Callable[[cst.CSTNode], int]) -> int | None:
    """Line of a return, yield, or break/continue that would leave ``stmts`` early, if any."""

    class _Finder(cst.CSTVisitor):
        def __init__(self) -> None:
            self.loops = 0
            self.found: cst.CSTNode | None = None

        def _own_scope(self, node: cst.FunctionDef | cst.Lambda | cst.ClassDef) -> bool:
            return False  # its returns and yields are its own

        visit_FunctionDef = visit_Lambda = visit_ClassDef = _own_scope

        def _loop(self, node: cst.For | cst.While) -> bool:
            # break/continue in the loop body stay in the loop; in its else: they leave it
            self.loops += 1
            node.body.visit(self)
            self.loops -= 1
            if node.orelse is not None:
                node.orelse.visit(self)
            return False

        visit_For = visit_While = _loop

        def _exit(self, node: cst.CSTNode) -> None:
            if self.found is None:
                self.found = node

        def _jump(self, node: cst.Break | cst.Continue) -> None:
            if not self.loops:
                self._exit(node)

        visit_Return = visit_Yield = _exit
        visit_Break = visit_Continue = _jump

    finder = _Finder()
    for stmt in stmts:
        stmt.visit(finder)
        if finder.found is not None:
            return line_of(stmt)
    return None


def suspension(stmts: Sequence[cst.BaseStatement], line_of: Callable[[cst.CSTNode], int]) -> int | None:
    """Line of an ``await``, ``async for`` or ``async with`` in ``stmts`` (outside nested defs,
    lambdas and classes): where a coroutine may be suspended, and a cancelled task leaves."""
    scopes = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
    for stmt in stmts:
        if isinstance(stmt, scopes):
            continue
        for node in walk(stmt, lambda n: isinstance(n, scopes)):
            if isinstance(node, cst.Await) or (
                isinstance(node, (cst.For, cst.With, cst.CompFor)) and node.asynchronous is not None
            ):
                return line_of(node)
    return None
