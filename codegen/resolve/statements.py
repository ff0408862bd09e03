"""Structural statement selectors: bind a :class:`Selector` to statements of one function."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node

from codegen.layout import code_of
from codegen.resolve.walk import bound_targets, walk
from codegen.spec.model import Selector


@dataclass(frozen=True)
class StatementSite:
    """A statement of the function body, with the block that holds it and its enclosing statements."""

    node: cst.BaseStatement
    block: cst.BaseSuite
    index: int
    ancestors: tuple[cst.BaseCompoundStatement, ...]


def statement_sites(func: cst.FunctionDef) -> list[StatementSite]:
    """Every statement of ``func`` in source order, not entering nested functions or classes."""
    sites: list[StatementSite] = []

    def walk(block: cst.BaseSuite, ancestors: tuple[cst.BaseCompoundStatement, ...]) -> None:
        if not isinstance(block, cst.IndentedBlock):
            return
        for index, stmt in enumerate(block.body):
            sites.append(StatementSite(stmt, block, index, ancestors))
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                continue
            if isinstance(stmt, cst.BaseCompoundStatement):
                for child in child_blocks(stmt):
                    walk(child, ancestors + (stmt,))

    walk(func.body, ())
    return sites


_ANCESTRY: dict[int, tuple[cst.FunctionDef, dict[int, tuple[tuple[int, int], ...]]]] = {}


def block_ancestry(func: cst.FunctionDef) -> dict[int, tuple[tuple[int, int], ...]]:
    """For every indented block of ``func``: the (id(block), index) of each enclosing statement."""
    cached = _ANCESTRY.get(id(func))
    if cached is not None and cached[0] is func:
        return cached[1]
    if len(_ANCESTRY) > 10_000:
        _ANCESTRY.clear()
    result: dict[int, tuple[tuple[int, int], ...]] = {}

    def walk(block: cst.BaseSuite, path: tuple[tuple[int, int], ...]) -> None:
        result[id(block)] = path
        if not isinstance(block, cst.IndentedBlock):
            return
        for index, stmt in enumerate(block.body):
            if isinstance(stmt, cst.BaseCompoundStatement) and not isinstance(
                stmt, (cst.FunctionDef, cst.ClassDef)
            ):
                for child in child_blocks(stmt):
                    walk(child, path + ((id(block), index),))

    walk(func.body, ())
    _ANCESTRY[id(func)] = (func, result)
    return result


def child_blocks(stmt: cst.BaseCompoundStatement) -> list[cst.BaseSuite]:
    """The indented blocks directly inside a compound statement, in source order."""
    if isinstance(stmt, cst.Match):
        return [case.body for case in stmt.cases]
    blocks = [stmt.body]
    if isinstance(stmt, cst.Try):
        blocks += [h.body for h in stmt.handlers]
    if isinstance(stmt, cst.TryStar):
        blocks += [h.body for h in stmt.handlers]
    orelse = getattr(stmt, "orelse", None)
    while orelse is not None:
        if isinstance(orelse, cst.If):  # elif chain
            blocks.append(orelse.body)
            orelse = orelse.orelse
        else:
            blocks.append(orelse.body)
            orelse = None
    final = getattr(stmt, "finalbody", None)
    if final is not None:
        blocks.append(final.body)
    return blocks


def normalize(code: str) -> str:
    text = " ".join(code.split())
    text = re.sub(r"([(\[{]) ", r"\1", text)
    text = re.sub(r",? ([)\]}])", r"\1", text)
    return text


def header_text(stmt: cst.BaseStatement) -> str | None:
    """The part of a compound statement between its keyword and the colon, normalized."""
    if isinstance(stmt, (cst.If, cst.While)):
        # `if (\n a\n and b\n):` is selected as `a and b`
        return normalize(code_of(stmt.test.with_changes(lpar=[], rpar=[])))
    if isinstance(stmt, cst.For):
        target = code_of(stmt.target)
        return normalize(f"{target} in {code_of(stmt.iter)}")
    if isinstance(stmt, cst.With):
        return normalize(", ".join(code_of(item).rstrip(", ") for item in stmt.items))
    return None


_KIND_TYPES: dict[str, type[cst.BaseCompoundStatement]] = {
    "if": cst.If,
    "for": cst.For,
    "while": cst.While,
    "with": cst.With,
}


def _header_matches(pattern: str, header: str) -> bool:
    pattern = normalize(pattern)
    if pattern.endswith("..."):
        return header.startswith(pattern[:-3].rstrip())
    return header == pattern


_CALLS: dict[int, tuple[cst.CSTNode, set[str]]] = {}


def calls_in(node: cst.CSTNode) -> set[str]:
    """Dotted names of every callee inside ``node``; remembered for the node (selectors ask the
    same statements again and again)."""
    hit = _CALLS.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    names = _calls_in(node)
    if len(_CALLS) > 200_000:
        _CALLS.clear()
    _CALLS[id(node)] = (node, names)
    return names


def _calls_in(node: cst.CSTNode) -> set[str]:
    names: set[str] = set()
    for call in walk(node):
        if isinstance(call, cst.Call):
            name = get_full_name_for_node(call.func)
            if name:
                names.add(name)
    return names


def assigned_names(stmt: cst.SimpleStatementLine) -> set[str]:
    """The plain names a statement assigns: ``x = ...``, ``x: T = ...``, ``x += ...`` and names
    unpacked by ``a, (b, *c) = ...``; never the names inside ``buf[i] = v`` or ``self.x = v``."""
    return {
        target.value
        for small in stmt.body
        if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign))
        for target in bound_targets(small)
        if isinstance(target, cst.Name)
    }


def matches(selector: Selector, site: StatementSite) -> bool:
    stmt = site.node
    if selector.kind == "call":
        return isinstance(stmt, cst.SimpleStatementLine) and selector.value in calls_in(stmt)
    if selector.kind == "assign":
        return isinstance(stmt, cst.SimpleStatementLine) and selector.value in assigned_names(stmt)
    if selector.kind == "return":
        return isinstance(stmt, cst.SimpleStatementLine) and any(
            isinstance(small, cst.Return)
            and normalize(code_of(small.value) if small.value else "") == normalize(selector.value)
            for small in stmt.body
        )
    if selector.kind == "try":
        return isinstance(stmt, cst.Try) and selector.value in calls_in(stmt.body)
    kind_type = _KIND_TYPES[selector.kind]
    if not isinstance(stmt, kind_type):
        return False
    header = header_text(stmt)
    return header is not None and _header_matches(selector.value, header)


def is_docstring(stmt: cst.CSTNode) -> bool:
    """A statement line holding only a string (a docstring where it comes first)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def first_line_code(stmt: cst.BaseStatement) -> str:
    """A one-line preview of a statement for candidate lists in error messages."""
    code = code_of(stmt.with_changes(leading_lines=()))
    first = code.strip().splitlines()[0] if code.strip() else ""
    return first if len(first) <= 80 else first[:77] + "..."
