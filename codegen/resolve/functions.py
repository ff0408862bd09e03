"""Find the function a span names (``func`` or ``Class.method``) and refuse unsafe targets."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import libcst as cst
from libcst.helpers import get_full_name_for_node

from codegen.resolve.statements import child_blocks
from codegen.resolve.walk import walk

# Decorators whose functions are compiled or scripted: wrapping their bodies changes semantics.
UNSAFE_DECORATORS = {
    "torch.jit.script": "torch.jit.script compiles the body",
    "jit.script": "torch.jit.script compiles the body",
    "torch.jit.script_method": "torch.jit.script compiles the body",
    "jit_fuser": "jit_fuser compiles the body",
    "torch.compile": "torch.compile compiles the body",
    "compile": "torch.compile compiles the body",
    "torch.jit.ignore": "torch.jit.ignore marks a scripted boundary",
    "megatron.core.jit.jit_fuser": "jit_fuser compiles the body",
    "overload": "an @overload declaration has no body to instrument",
    "typing.overload": "an @overload declaration has no body to instrument",
    "typing_extensions.overload": "an @overload declaration has no body to instrument",
}
_OVERLOAD = {"overload", "typing.overload", "typing_extensions.overload"}
_ACCESSORS = ("setter", "getter", "deleter")


def import_aliases(module: cst.Module) -> dict[str, str]:
    """Local name -> the dotted name it was imported as, for every import of the module outside
    functions (``from torch import compile as tc`` maps ``tc`` to ``torch.compile``)."""
    aliases: dict[str, str] = {}
    stack: list[cst.CSTNode] = list(module.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            stack.extend(stmt.body.body)
        elif isinstance(stmt, cst.BaseCompoundStatement) and not isinstance(stmt, cst.FunctionDef):
            for block in child_blocks(stmt):
                stack.extend(getattr(block, "body", ()))
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for name in small.names:
                        dotted = get_full_name_for_node(name.name) or ""
                        if name.asname is not None and isinstance(name.asname.name, cst.Name):
                            aliases[name.asname.name.value] = dotted
                        else:
                            head = dotted.split(".")[0]
                            aliases[head] = head
                elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
                    if isinstance(small.names, cst.ImportStar):
                        continue
                    source = get_full_name_for_node(small.module) or ""
                    for name in small.names:
                        imported = get_full_name_for_node(name.name) or ""
                        bound = name.asname.name if name.asname is not None else name.name
                        if isinstance(bound, cst.Name):
                            aliases[bound.value] = f"{source}.{imported}"
    return aliases


def resolve_name(name: str, aliases: dict[str, str]) -> str:
    """``tc`` -> ``torch.compile`` and ``t.jit.script`` -> ``torch.jit.script`` through imports."""
    head, dot, rest = name.partition(".")
    return aliases.get(head, head) + dot + rest if head in aliases else name


def _decorator_names(func: cst.FunctionDef) -> list[str]:
    names = []
    for decorator in func.decorators:
        target = decorator.decorator
        if isinstance(target, cst.Call):
            target = target.func
        names.append(get_full_name_for_node(target) or "")
    return names


def collect_functions(module: cst.Module) -> dict[str, list[cst.FunctionDef]]:
    """Every definition of every function and method reachable through classes and compound
    statements (``if HAVE_TE:``, ``try:``, ``with``, loops), keyed by dotted qualname; functions
    defined at the top level of another function's body are ``outer.inner``. A property's setter
    (``@x.setter def x``) is ``x.setter`` (likewise ``getter``, ``deleter``). ``@overload``
    declarations beside an implementation are left out: the name means the implementation.
    A name defined twice (``if HAVE_TE: def f ... else: def f ...``) has two entries."""
    found: dict[str, list[cst.FunctionDef]] = {}

    def walk(body: Sequence[cst.BaseStatement], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, cst.FunctionDef):
                name = prefix + stmt.name.value
                accessor = next(
                    (
                        n.rpartition(".")[2]
                        for n in _decorator_names(stmt)
                        if n.rpartition(".")[0] == stmt.name.value and n.rpartition(".")[2] in _ACCESSORS
                    ),
                    None,
                )
                if accessor is not None:
                    name += "." + accessor
                found.setdefault(name, []).append(stmt)
                if isinstance(stmt.body, cst.IndentedBlock):
                    walk(stmt.body.body, name + ".")
            elif isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
                walk(stmt.body.body, f"{prefix}{stmt.name.value}.")
            elif isinstance(stmt, cst.BaseCompoundStatement):
                for block in child_blocks(stmt):  # e.g. functions defined under `if HAVE_TE:`
                    if isinstance(block, cst.IndentedBlock):
                        walk(block.body, prefix)

    walk(module.body, "")
    aliases: dict[str, str] | None = None
    for name, definitions in found.items():
        if len(definitions) > 1:
            aliases = import_aliases(module) if aliases is None else aliases
            implementations = [
                d
                for d in definitions
                if not any(resolve_name(n, aliases) in _OVERLOAD for n in _decorator_names(d))
            ]
            if implementations:
                found[name] = implementations
    return found


def suggest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    if not close:
        tail = name.rpartition(".")[2]
        close = [c for c in candidates if c.rpartition(".")[2] == tail][:3]
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def unsafe_reason(
    func: cst.FunctionDef, is_generator: bool | None = None, aliases: dict[str, str] | None = None
) -> str | None:
    """Why the body of ``func`` must not be wrapped, or None when it is safe. ``aliases``
    (:func:`import_aliases`) resolves decorators imported under another name."""
    for name in _decorator_names(func):
        resolved = resolve_name(name, aliases or {})
        for candidate in (name, resolved):
            if candidate in UNSAFE_DECORATORS:
                spelled = name if resolved == name else f"{name} ({resolved})"
                return f"decorated with @{spelled}: {UNSAFE_DECORATORS[candidate]}"
    if is_generator if is_generator is not None else _is_generator(func):
        if func.asynchronous is not None:
            return (
                "it is an async generator: a span around its body would stay open across yields "
                "(span the coroutine that returns it, with stream: on that span)"
            )
        return "it is a generator: a span around its body would stay open across yields"
    if _is_stub(func):
        return "its body is a stub (only a docstring, 'pass' or '...')"
    return None


def _is_generator(func: cst.FunctionDef) -> bool:
    """Whether ``func`` yields (not counting nested defs, lambdas and classes)."""
    return any(
        isinstance(node, cst.Yield)
        for node in walk(func, lambda n: isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)))
    )


def _is_stub(func: cst.FunctionDef) -> bool:
    def trivial(small: cst.CSTNode) -> bool:
        return isinstance(small, cst.Pass) or (
            isinstance(small, cst.Expr)
            and isinstance(small.value, (cst.Ellipsis, cst.SimpleString, cst.ConcatenatedString))
        )

    body = func.body
    if isinstance(body, cst.SimpleStatementSuite):
        return all(trivial(s) for s in body.body)
    return all(isinstance(s, cst.SimpleStatementLine) and all(trivial(x) for x in s.body) for s in body.body)
