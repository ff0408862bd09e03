"""Read the spans back out of instrumented sources: the generated code is the evidence, not the specs."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class FoundSpan:
    name: str
    flag: str
    function: str  # dotted qualname of the enclosing function
    body: list[ast.stmt]  # the covered statements, nested spans unwrapped
    enclosing_block: list[ast.stmt]  # the statements of the block holding the span
    index: int  # position of the span's first statement in that block
    parent: str | None = None  # the span whose covered statements contain this one
    end_attributes: list[str] = field(default_factory=list)


def _start(stmt: ast.stmt, alias: str) -> tuple[str, str, str] | None:
    """``(variable, flag, name)`` of ``var = alias.FLAG and alias.start_span("name", ...)``."""
    if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.BoolOp)):
        return None
    guard, call = stmt.value.values[0], stmt.value.values[-1]
    if not (isinstance(guard, ast.Attribute) and isinstance(guard.value, ast.Name) and guard.value.id == alias):
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "start_span"):
        return None
    name = call.args[0]
    assert isinstance(name, ast.Constant) and isinstance(name.value, str)
    target = stmt.targets[0]
    assert isinstance(target, ast.Name)
    return target.id, guard.attr, name.value


def _is_end(stmt: ast.stmt, var: str) -> bool:
    return ast.unparse(stmt) == f"{var} and {var}.end()"


def find_spans(source: str, alias: str) -> list[FoundSpan]:
    found: list[FoundSpan] = []

    def unwrap(stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        i = 0
        while i < len(stmts):
            start = _start(stmts[i], alias)
            if start and i + 1 < len(stmts) and isinstance(stmts[i + 1], ast.Try):
                try_stmt = stmts[i + 1]
                assert isinstance(try_stmt, ast.Try)
                out.extend(unwrap([s for s in try_stmt.body if not _is_setter(s, start[0])]))
                i += 2
            else:
                out.append(stmts[i])
                i += 1
        return out

    def walk(stmts: list[ast.stmt], qualname: str, parent: str | None) -> None:
        for index, stmt in enumerate(stmts):
            start = _start(stmt, alias)
            if start and index + 1 < len(stmts) and isinstance(stmts[index + 1], ast.Try):
                var, flag, name = start
                try_stmt = stmts[index + 1]
                assert isinstance(try_stmt, ast.Try)
                assert len(try_stmt.finalbody) == 1 and _is_end(try_stmt.finalbody[0], var), name
                setters = [ast.unparse(s) for s in try_stmt.body if _is_setter(s, var)]
                found.append(
                    FoundSpan(name, flag, qualname, unwrap(try_stmt.body), stmts, index, parent, setters)
                )
                walk(try_stmt.body, qualname, name)
            elif isinstance(stmt, ast.Try) and index > 0 and _start(stmts[index - 1], alias):
                continue
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(stmt.body, f"{qualname}.{stmt.name}" if qualname else stmt.name, None)
            elif isinstance(stmt, ast.ClassDef):
                walk(stmt.body, f"{qualname}.{stmt.name}" if qualname else stmt.name, None)
            else:
                for block in ("body", "orelse", "finalbody", "handlers"):
                    children = getattr(stmt, block, None)
                    if isinstance(children, list) and children and isinstance(children[0], ast.stmt):
                        walk(children, qualname, parent)
                    elif block == "handlers" and children:
                        for handler in children:
                            walk(handler.body, qualname, parent)

    walk(ast.parse(source).body, "", None)
    return found


def _is_setter(stmt: ast.stmt, var: str) -> bool:
    return isinstance(stmt, ast.Expr) and ast.unparse(stmt).startswith(f"{var} and {var}.set_attributes(")


def calls(stmt: ast.stmt) -> set[str]:
    return {ast.unparse(n.func) for n in ast.walk(stmt) if isinstance(n, ast.Call)}
