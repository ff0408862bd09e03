"""Find the function a span names (``func`` or ``Class.method``) and refuse unsafe targets."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node

from codegen.resolve.statements import child_blocks

# Decorators whose functions are compiled or scripted: wrapping their bodies changes semantics.
UNSAFE_DECORATORS = {
    "torch.jit.script": "torch.jit.script compiles the body",
    "jit.script": "torch.jit.script compiles the body",
    "torch.jit.script_method": "torch.jit.script compiles the body",
    "jit_fuser": "jit_fuser compiles the body",
    "torch.compile": "torch.compile compiles the body",
    "compile": "torch.compile compiles the body",
    "torch.jit.ignore": "torch.jit.ignore marks a scripted boundary",
    "overload": "an @overload declaration has no body to instrument",
    "typing.overload": "an @overload declaration has no body to instrument",
}


@dataclass(frozen=True)
class FunctionSite:
    qualname: str
    node: cst.FunctionDef


def collect_functions(module: cst.Module) -> dict[str, list[cst.FunctionDef]]:
    """Every definition of every function and method reachable through classes, keyed by dotted
    qualname; functions defined at the top level of another function's body are ``outer.inner``.
    A name defined twice (``if HAVE_TE: def f ... else: def f ...``) has two entries."""
    found: dict[str, list[cst.FunctionDef]] = {}

    def walk(body: Sequence[cst.BaseStatement], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, cst.FunctionDef):
                name = prefix + stmt.name.value
                found.setdefault(name, []).append(stmt)
                if isinstance(stmt.body, cst.IndentedBlock):
                    walk(stmt.body.body, name + ".")
            elif isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
                walk(stmt.body.body, f"{prefix}{stmt.name.value}.")
            elif isinstance(stmt, (cst.If, cst.Try)):
                for block in child_blocks(stmt):  # e.g. functions defined under `if HAVE_TE:`
                    if isinstance(block, cst.IndentedBlock):
                        walk(block.body, prefix)

    walk(module.body, "")
    return found


def suggest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    if not close:
        tail = name.rpartition(".")[2]
        close = [c for c in candidates if c.rpartition(".")[2] == tail][:3]
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def unsafe_reason(func: cst.FunctionDef, is_generator: bool | None = None) -> str | None:
    """Why the body of ``func`` must not be wrapped, or None when it is safe."""
    for decorator in func.decorators:
        target = decorator.decorator
        if isinstance(target, cst.Call):
            target = target.func
        name = get_full_name_for_node(target) or ""
        if name in UNSAFE_DECORATORS:
            return f"decorated with @{name}: {UNSAFE_DECORATORS[name]}"
    if func.asynchronous is not None:
        return "it is a coroutine (async def): spans are kept per thread, not per task"
    if is_generator if is_generator is not None else _is_generator(func):
        return "it is a generator: a span around its body would stay open across yields"
    if _is_stub(func):
        return "its body is a stub (only a docstring, 'pass' or '...')"
    return None


def _is_generator(func: cst.FunctionDef) -> bool:
    class _Finder(cst.CSTVisitor):
        found = False

        def visit_Yield(self, node: cst.Yield) -> bool:
            self.found = True
            return False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is func

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

    finder = _Finder()
    func.visit(finder)
    return finder.found


def _is_stub(func: cst.FunctionDef) -> bool:
    trivial = m.Pass() | m.Expr(m.Ellipsis() | m.SimpleString() | m.ConcatenatedString())
    body = func.body
    if isinstance(body, cst.SimpleStatementSuite):
        return all(m.matches(s, trivial) for s in body.body)
    return all(
        isinstance(s, cst.SimpleStatementLine) and all(m.matches(x, trivial) for x in s.body)
        for s in body.body
    )
