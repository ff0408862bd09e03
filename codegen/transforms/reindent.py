"""Lay re-indented statements out again where black would: a call whose arguments were hugged on
one line gets one argument per line once that line no longer fits."""

from __future__ import annotations

import libcst as cst

from codegen.resolve.walk import code_of
from codegen.transforms.render import LINE_LENGTH


def fit(stmt: cst.BaseStatement, indent: str, origin: str) -> cst.BaseStatement:
    """``stmt`` moved from ``origin`` in to ``indent``: of its lines that fitted before and no
    longer do, the hugged argument lines of calls with several arguments go one per line."""
    for _ in range(8):
        lines = code_of(stmt).splitlines()
        long = {
            line.strip()
            for line in lines
            if len(indent + line) > LINE_LENGTH and len(origin + line) <= LINE_LENGTH
        }
        if not long:
            return stmt
        target = next((c for c in _hugged_calls(stmt) if _args_text(c) in long), None)
        if target is None:
            return stmt
        stmt = stmt.visit(_Explode(target))  # type: ignore[assignment]  # libcst: visit() may return a sentinel
    return stmt


def _args_text(call: cst.Call) -> str:
    return code_of(call.with_changes(func=cst.Name("f"))).split("\n")[1].strip()


def _hugged_calls(stmt: cst.BaseStatement) -> list[cst.Call]:
    """Calls laid out as ``f(\n    a, b\n)``: arguments on one line of their own."""
    found: list[cst.Call] = []

    class _Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            opening = node.whitespace_before_args
            # black splits inside a sole argument instead (and a bare generator needs no comma)
            if len(node.args) < 2 or not isinstance(opening, cst.ParenthesizedWhitespace):
                return
            last = node.args[-1]
            inner = code_of(node.with_changes(func=cst.Name("f"))).split("\n")
            if len(inner) == 3 and isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
                found.append(node)

    stmt.visit(_Finder())
    return found


class _Explode(cst.CSTTransformer):
    def __init__(self, call: cst.Call) -> None:
        super().__init__()
        self.call = call

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if original_node is not self.call:
            return updated_node
        opening = updated_node.whitespace_before_args
        if isinstance(opening, cst.ParenthesizedWhitespace):  # a comment after "(" stays there only
            separator = opening.with_changes(first_line=cst.TrailingWhitespace())
        args = list(updated_node.args)
        closing = args[-1].whitespace_after_arg
        exploded = [
            a.with_changes(
                comma=cst.Comma(whitespace_after=separator), whitespace_after_arg=cst.SimpleWhitespace("")
            )
            for a in args[:-1]
        ]
        exploded.append(
            args[-1].with_changes(
                comma=cst.Comma(whitespace_after=closing), whitespace_after_arg=cst.SimpleWhitespace("")
            )
        )
        return updated_node.with_changes(args=exploded)
