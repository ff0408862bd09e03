"""Read the spans back out of instrumented sources: the generated code is the evidence, not the specs.

Recognizes the three forms the generator writes:

- try:       ``var = _otel.FLAG [and cond] and _otel.start_span(NAME, ...)`` + ``try: ... finally: var and var.end()``
- flat:      the same start statement, the covered statements, then ``var and var.end()`` in the same block
- decorator: ``@_otel.traced(NAME, {...})`` on a function
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codegen.pipeline import Generation


@dataclass
class FoundSpan:
    names: tuple[str, ...]  # the literal names the first argument can evaluate to
    flag: str
    function: str  # dotted qualname of the enclosing function
    form: str
    body: list[ast.stmt]  # the covered statements, nested spans unwrapped
    block: list[ast.stmt]  # the statements of the block holding the span
    index: int  # position of the span's first statement in that block
    attributes: dict[str, str] = field(default_factory=dict)
    end_attributes: dict[str, str] = field(default_factory=dict)
    condition: str | None = None
    parent: tuple[str, ...] | None = None  # the enclosing span in the same function

    @property
    def name(self) -> str:
        return self.names[0]


def _literal_names(node: ast.expr) -> tuple[str, ...]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    return tuple(n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def _dict_of(node: ast.expr | None) -> dict[str, str]:
    if isinstance(node, ast.Lambda):
        node = node.body
    if not isinstance(node, ast.Dict):
        return {}
    return {
        ast.literal_eval(k): (ast.literal_eval(v) if isinstance(v, ast.Constant) else ast.unparse(v))
        for k, v in zip(node.keys, node.values)
    }  # type: ignore[arg-type]


def _start(stmt: ast.stmt, alias: str) -> tuple[str, str, ast.Call, str | None] | None:
    """``(variable, flag, start_span call, extra condition)`` of a span start statement."""
    if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.BoolOp)):
        return None
    operands = stmt.value.values
    guard, call = operands[0], operands[-1]
    if not (
        isinstance(guard, ast.Attribute) and isinstance(guard.value, ast.Name) and guard.value.id == alias
    ):
        return None
    if not (
        isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "start_span"
    ):
        return None
    target = stmt.targets[0]
    assert isinstance(target, ast.Name)
    condition = ast.unparse(operands[1]) if len(operands) == 3 else None
    return target.id, guard.attr, call, condition


def _is_end(stmt: ast.stmt, var: str) -> bool:
    return ast.unparse(stmt) == f"{var} and {var}.end()"


def _guarding_try(stmts: list[ast.stmt], i: int, var: str) -> ast.Try | None:
    """The ``try:`` after ``stmts[i]`` whose ``finally:`` ends with ending span ``var``, if any."""
    after = stmts[i + 1] if i + 1 < len(stmts) else None
    if isinstance(after, ast.Try) and after.finalbody and _is_end(after.finalbody[-1], var):
        return after
    return None


def _setter(stmt: ast.stmt, var: str) -> dict[str, str] | None:
    if isinstance(stmt, ast.Expr) and ast.unparse(stmt).startswith(f"{var} and {var}.set_attributes("):
        call = stmt.value.values[1]  # type: ignore[attr-defined]
        return _dict_of(call.args[0])
    return None


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def find_spans(source: str, alias: str) -> list[FoundSpan]:
    found: list[FoundSpan] = []

    def spans_in(
        stmts: list[ast.stmt],
    ) -> list[tuple[int, int, ast.Call, str, str, str | None, str, dict[str, str]]]:
        """(first index, end index exclusive, call, var, flag, condition, form, end attributes) of spans in a block."""
        out = []
        for i, stmt in enumerate(stmts):
            start = _start(stmt, alias)
            if start is None:
                continue
            var, flag, call, condition = start
            form, end = "try", i + 2
            if _guarding_try(stmts, i, var) is None:
                last = next((j for j in range(i + 1, len(stmts)) if _is_end(stmts[j], var)), None)
                assert last is not None, f"span start without end: {ast.unparse(stmt)}"
                form, end = "flat", last + 1
            setters = [s for s in (_setter(x, var) for x in inside(stmts, i, end, form)) if s is not None]
            out.append((i, end, call, var, flag, condition, form, setters[0] if setters else {}))
        return out

    def inside(stmts: list[ast.stmt], first: int, end: int, form: str) -> list[ast.stmt]:
        """The statements between a span's start and its end: its try's body, or the flat run."""
        return stmts[first + 1].body if form == "try" else stmts[first + 1 : end - 1]  # type: ignore[attr-defined]

    def covered(stmts: list[ast.stmt], first: int, end: int, form: str, var: str) -> list[ast.stmt]:
        return unwrap([s for s in inside(stmts, first, end, form) if _setter(s, var) is None])

    def unwrap(stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        position = 0
        for first, end, _, var, _, _, form, _ in spans_in(stmts):
            if first < position:
                continue
            out.extend(stmts[position:first])
            out.extend(covered(stmts, first, end, form, var))
            position = end
        out.extend(stmts[position:])
        return out

    def walk(stmts: list[ast.stmt], qualname: str, parent: tuple[str, ...] | None) -> None:
        spans = spans_in(stmts)
        claimed: set[int] = set()
        for first, end, call, var, flag, condition, form, end_attrs in spans:
            if first in claimed:
                continue
            names = _literal_names(call.args[0])
            attrs = _dict_of(call.args[1]) if len(call.args) > 1 else {}
            body = covered(stmts, first, end, form, var)
            found.append(
                FoundSpan(
                    names, flag, qualname, form, body, stmts, first, attrs, end_attrs, condition, parent
                )
            )
            walk(list(inside(stmts, first, end, form)), qualname, names)
            claimed.update(range(first, end))
        for index, stmt in enumerate(stmts):
            if index in claimed:
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{qualname}.{stmt.name}" if qualname else stmt.name
                outer = None
                for decorator in stmt.decorator_list:
                    if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == f"{alias}.traced":
                        names = _literal_names(decorator.args[0])
                        attrs = _dict_of(decorator.args[1]) if len(decorator.args) > 1 else {}
                        body = [s for s in stmt.body if not _is_docstring(s)]
                        found.append(
                            FoundSpan(names, "", name, "decorator", unwrap(body), stmt.body, 0, attrs)
                        )
                        outer = names
                walk(stmt.body, name, outer)
            elif isinstance(stmt, ast.ClassDef):
                walk(stmt.body, f"{qualname}.{stmt.name}" if qualname else stmt.name, None)
            else:
                for attr in ("body", "orelse", "finalbody"):
                    children = getattr(stmt, attr, None)
                    if isinstance(children, list) and children and isinstance(children[0], ast.stmt):
                        walk(children, qualname, parent)
                for handler in getattr(stmt, "handlers", []) or []:
                    walk(handler.body, qualname, parent)

    walk(ast.parse(source).body, "", None)
    return found


def calls(stmt: ast.stmt) -> set[str]:
    return {ast.unparse(n.func) for n in ast.walk(stmt) if isinstance(n, ast.Call)}


def assigned(stmt: ast.stmt) -> set[str]:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def deinstrument(stmts: list[ast.stmt], alias: str) -> list[ast.stmt]:
    """A copy of ``stmts`` with every span construct unwrapped and every runtime call removed, at
    any depth: what must equal the pristine statements."""
    import copy

    def block(items: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        i = 0
        while i < len(items):
            stmt = items[i]
            start = _start(stmt, alias)
            if start is not None:
                var = start[0]
                guarded = _guarding_try(items, i, var)
                if guarded is not None:
                    out.extend(block(guarded.body))
                    i += 2
                    continue
                i += 1
                continue
            text = ast.unparse(stmt)
            if text.startswith(f"{alias}.") or re.match(r"_otel_span\w* and _otel_span\w*\.", text):
                i += 1
                continue
            if (
                isinstance(stmt, ast.Try)
                and len(stmt.finalbody) == 1
                and ast.unparse(stmt.finalbody[0]).startswith(f"{alias}.")
            ):
                out.extend(block(stmt.body))  # an around hook's try/finally
                i += 1
                continue
            stmt = copy.copy(stmt)
            for attr in ("body", "orelse", "finalbody"):
                child = getattr(stmt, attr, None)
                if isinstance(child, list) and child and isinstance(child[0], ast.stmt):
                    setattr(stmt, attr, block(child))
            if isinstance(stmt, ast.Try):
                stmt.handlers = [copy.copy(h) for h in stmt.handlers]
                for h in stmt.handlers:
                    h.body = block(h.body)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                stmt.decorator_list = [
                    d for d in stmt.decorator_list if not ast.unparse(d).startswith(f"{alias}.")
                ]
            out.append(stmt)
            i += 1
        return out

    return block(list(stmts))


# -- the span names a generation documents and emits (tests/target/test_docs_match_code.py, test_releases.py)

ALIAS = "_otel"  # the name the generated code imports the runtime as


def documented_names(generation: Generation) -> set[str]:
    """Span names of the spans page's tables (the compatibility table that follows them lists
    attribute names, not spans)."""
    page = generation.docs["spans.md"].split("\n## Names kept for compatibility")[0]
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    return {re.match(r"\| `([^`]+)`", line).group(1) for line in rows}  # type: ignore[union-attr]


def emitted_by_instrumented_code(generation: Generation) -> set[str]:
    return {
        name
        for path, (_, new) in generation.changes.items()
        for span in find_spans(new, ALIAS)
        for name in span.names
    }


def emitted_by_runtime(generation: Generation) -> set[str]:
    """Names the runtime's lifecycle opens: the string constants of the rendered taxonomy's
    lifecycle tables."""
    package = generation.project.runtime.package
    source = generation.changes[f"{package}/_taxonomy.py"][1]
    names: set[str] = set()
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        table = next((t.id for t in targets if isinstance(t, ast.Name)), "")
        if table in {"STARTUP", "INTERVAL"} and isinstance(node.value, ast.Call):
            names.add(ast.literal_eval(node.value.args[0]))  # Startup(name, ...), Interval(name, ...)
        elif table in {"PHASES", "PRE_STARTUP"} and isinstance(node.value, ast.Tuple):
            names |= {
                ast.literal_eval(phase.args[0]) for phase in node.value.elts if isinstance(phase, ast.Call)
            }
    return names
