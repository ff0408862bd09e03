"""The generator's post-condition: every entry a file's plan reports placed is in the new source.

A span reported placed must be started (or, in the decorator form, traced) in the function the
plan bound it to, with its name; a hook's calls (and a wrap hook's wrapper) must appear there once
more than in the pristine function. The functions of the old and the new source are matched by
their nesting (``Class.method.inner``) and their rank among the definitions of that nesting, in
source order: the transforms add and remove no definition. Only a function's own code counts, not
that of the functions and classes defined inside it.

Anything missing is a bug of the generator, never of the specs: :class:`PlacementError` says which
entry (located at its spec line) and where it should have been, and nothing is written.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator, Sequence

import libcst as cst

from codegen.diagnostics import PlacementError, Pos
from codegen.resolve.sites import FilePlan
from codegen.resolve.statements import child_blocks
from codegen.runtime_calls import bind, hook_calls
from codegen.spec.model import Hook, Project, Span, WrapHook

__all__ = ["PlacementError", "check_placed"]

_Key = tuple[tuple[str, ...], int]  # (nesting names, rank among the definitions of that nesting)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def check_placed(project: Project, plan: FilePlan, new: str) -> None:
    """Raise :class:`PlacementError` unless every entry of ``plan`` is found in ``new``."""
    expected = _expected(project, plan)
    if not expected:
        return
    keys = _cst_keys(plan.module.body)
    old_functions = _ast_functions(ast.parse(plan.module.code.lstrip("\ufeff")))
    new_functions = _ast_functions(ast.parse(new.lstrip("\ufeff")))
    problems: list[tuple[Pos, str]] = []
    for function_id, wanted in expected.items():
        key = keys.get(function_id)
        where = ".".join(key[0]) if key is not None else "?"
        found = new_functions.get(key) if key is not None else None
        before = old_functions.get(key) if key is not None else None
        for marker, entries in wanted.items():
            have = 0 if found is None else _count(found, marker)
            had = 0 if before is None else _count(before, marker)
            if have - had >= len(entries):
                continue
            for entry, what in entries:
                message = (
                    f"{what} reported placed in `{where}` ({plan.path}), but the generated code "
                    "of that function lacks it (a bug of the generator: please report it)"
                )
                problems.append((entry.pos, message))
    if problems:
        raise PlacementError(problems)


# What to look for: (node kind, its ast.dump without positions), optionally the dump of the first
# argument of a call (a span's name)
_Marker = tuple[str, str]


def _expected(project: Project, plan: FilePlan) -> dict[int, dict[_Marker, list[tuple[Span | Hook, str]]]]:
    runtime = project.runtime
    binding = runtime.binding
    expected: dict[int, dict[_Marker, list[tuple[Span | Hook, str]]]] = {}

    def want(function: cst.FunctionDef, marker: _Marker, entry: Span | Hook, what: str) -> None:
        expected.setdefault(id(function), {}).setdefault(marker, []).append((entry, what))

    def span_name(span: Span) -> str:
        text = bind(span.name_expr, runtime.alias, binding) if span.name_expr else repr(span.name)
        return ast.dump(ast.parse(f"({text}\n)", mode="eval").body)

    for wrap in plan.wraps:
        entry = wrap.entry
        if isinstance(entry, Span):
            want(wrap.function, ("start_span", span_name(entry)), entry, f"span {entry.name!r}")
        else:
            for call in hook_calls(entry, runtime.alias, binding):
                want(wrap.function, _expression(call), entry, f"the hook call `{call}`")
    for insert in plan.inserts:
        for call in hook_calls(insert.hook, runtime.alias, binding):
            want(insert.function, _expression(call), insert.hook, f"the hook call `{call}`")
    for span, function in plan.decorations:
        want(function, ("traced", span_name(span)), span, f"span {span.name!r} (decorator)")
    for rewrite in plan.rewrites:
        hook: WrapHook = rewrite.hook
        wrapper = bind(hook.wrapper, runtime.alias, binding)
        want(rewrite.function, _expression(wrapper), hook, f"the wrapper `{wrapper}`")
    return expected


def _expression(code: str) -> _Marker:
    node = ast.parse(f"({code}\n)", mode="eval").body
    return (type(node).__name__, ast.dump(node))


def _count(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, marker: _Marker) -> int:
    kind, dump = marker
    count = 0
    for node in _own_nodes(function):
        if kind in ("start_span", "traced"):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == kind
                and node.args
                and ast.dump(node.args[0]) == dump
            ):
                count += 1
        elif type(node).__name__ == kind and ast.dump(node) == dump:
            count += 1
    return count


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> Iterator[ast.AST]:
    """Every node of ``function`` (its decorators included), not those of the functions and
    classes defined inside it."""
    stack: list[ast.AST] = [*function.decorator_list, *function.body]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _DEFINITIONS))


def _cst_keys(body: Sequence[cst.BaseStatement]) -> dict[int, _Key]:
    """id of every function definition of the module -> its key."""
    keys: dict[int, _Key] = {}
    seen: Counter[tuple[str, ...]] = Counter()

    def walk(stmts: Sequence[cst.BaseStatement], path: tuple[str, ...]) -> None:
        for stmt in stmts:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                here = (*path, stmt.name.value)
                if isinstance(stmt, cst.FunctionDef):
                    keys[id(stmt)] = (here, seen[here])
                seen[here] += 1
                walk(getattr(stmt.body, "body", ()), here)
            elif isinstance(stmt, cst.BaseCompoundStatement):
                for block in child_blocks(stmt):
                    walk(getattr(block, "body", ()), path)

    walk(body, ())
    return keys


def _ast_functions(module: ast.Module) -> dict[_Key, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """Every definition of the module by its key (ranked in source order like :func:`_cst_keys`)."""
    found: dict[_Key, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = {}
    seen: Counter[tuple[str, ...]] = Counter()

    def walk(stmts: Sequence[ast.stmt], path: tuple[str, ...]) -> None:
        for stmt in stmts:
            if isinstance(stmt, _DEFINITIONS):
                here = (*path, stmt.name)
                found[(here, seen[here])] = stmt
                seen[here] += 1
                walk(stmt.body, here)
                continue
            for field in ("body", "handlers", "orelse", "finalbody", "cases"):
                for child in getattr(stmt, field, ()):
                    if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                        walk(child.body, path)
                    elif isinstance(child, ast.stmt):
                        walk([child], path)

    walk(module.body, ())
    return found
