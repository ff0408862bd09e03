"""What resolution asks of a function or module, gathered in one walk: what is already
instrumented, which names are taken, whether it yields."""

from __future__ import annotations

import ast

import libcst as cst
import libcst.matchers as m

from codegen.resolve.functions import unsafe_reason
from codegen.spec.model import Hook, Span
from codegen.transforms.span import SPAN_VARIABLE


def compact(code: str) -> str:
    """What an expression means, without its layout: parentheses, line breaks, trailing commas and
    implicitly concatenated strings all vanish, so a rendered call compares equal to the spec's."""
    try:
        return ast.dump(ast.parse(code.strip(), mode="eval"))
    except SyntaxError:
        return code


def _hook_statement_code(hook: Hook, alias: str) -> list[str]:
    calls = [c for c in (hook.call, hook.enter, hook.exit) if c]
    prefix = f"{alias}.{hook.guard} and " if hook.guard else ""
    return [compact(prefix + c) for c in calls]


class Facts:
    """What resolution asks of each function, gathered in one walk: a function such as ``train``
    holds dozens of specs' statements, and each question is otherwise a walk over its whole tree."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._scans: dict[int, _Scan] = {}

    def _scan(self, func: cst.FunctionDef) -> _Scan:
        scan = self._scans.get(id(func))
        if scan is None:
            scan = self._scans[id(func)] = _Scan(func, self.alias)
            func.visit(scan)
        return scan

    def unsafe(self, func: cst.FunctionDef) -> str | None:
        return unsafe_reason(func, is_generator=self._scan(func).generator)

    def taken_names(self, func: cst.FunctionDef) -> set[str]:
        """``_otel_span*`` names the function uses although no span of ours is in it yet."""
        scan = self._scan(func)
        return set() if scan.started else scan.span_names

    def instrumented(self, func: cst.FunctionDef, entry: Span | Hook) -> bool:
        scan = self._scan(func)
        if isinstance(entry, Hook):
            if entry.kind == "wrap":
                return False  # decided once the call is found
            return all(code in scan.statement_codes() for code in _hook_statement_code(entry, self.alias))
        return any(_names_span(first, entry) for first in scan.started)


class _Scan(cst.CSTVisitor):
    """One walk of a function: does it yield, which spans it already starts, which expression
    statements it already has (to recognize hooks applied before)."""

    def __init__(self, func: cst.FunctionDef, alias: str) -> None:
        super().__init__()
        self.func = func
        self.alias = alias
        self.generator = False
        self.started: list[cst.BaseExpression] = []
        self.statements: list[cst.Expr] = []
        self.span_names: set[str] = set()
        self._codes: set[str] | None = None
        self._nested = 0

    def statement_codes(self) -> set[str]:
        if self._codes is None:
            self._codes = {compact(cst.Module([]).code_for_node(e)) for e in self.statements}
        return self._codes

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node is not self.func:
            self._nested += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if original_node is not self.func:
            self._nested -= 1

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._nested += 1

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self._nested -= 1

    def visit_Name(self, node: cst.Name) -> None:
        if node.value.startswith(SPAN_VARIABLE):
            self.span_names.add(node.value)

    def visit_Yield(self, node: cst.Yield) -> None:
        if not self._nested:
            self.generator = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (
            node.args
            and isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == self.alias
            and func.attr.value in ("start_span", "traced")
        ):
            self.started.append(node.args[0].value)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        expr = node.body[0]
        # hooks are calls or `otel.FLAG and call`: skip docstrings and other bare expressions
        if (
            len(node.body) == 1
            and isinstance(expr, cst.Expr)
            and isinstance(expr.value, (cst.Call, cst.BooleanOperation))
        ):
            self.statements.append(expr)


def _started_names(node: cst.CSTNode, alias: str) -> list[cst.BaseExpression]:
    """The first argument of every ``alias.start_span(...)`` / ``alias.traced(...)`` in ``node``."""
    pattern = m.Call(
        func=m.Attribute(value=m.Name(alias), attr=m.Name("start_span") | m.Name("traced")),
        args=[m.Arg(), m.ZeroOrMore()],
    )
    return [call.args[0].value for call in m.findall(node, pattern)]  # type: ignore[union-attr]


def _names_span(first: cst.BaseExpression, entry: Span) -> bool:
    if entry.name_expr is not None:
        return " ".join(cst.Module([]).code_for_node(first).split()) == entry.name_expr
    return isinstance(first, cst.SimpleString) and first.evaluated_value == entry.name


def span_started(node: cst.CSTNode, alias: str, entry: Span) -> bool:
    """Whether ``node`` contains the start (or decorator) of span ``entry``."""
    return any(_names_span(first, entry) for first in _started_names(node, alias))
