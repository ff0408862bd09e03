"""Static checks of the Python expressions a spec inserts into instrumented functions.

Span ``attributes``, ``when`` and ``name_expr`` run where the span starts, ``end_attributes`` where
its statements end; hook payloads (``call``, ``record``, ``stamp``, ``enter``, ``exit``, a wrap's
``with``) run where the hook is placed. Each free name of such an expression must be bound at that
point of the function (``symtable`` and ``ast`` over the expression and the module): a parameter or
a local assigned before the point (one assigned only after it is an error), a name of an enclosing
function, a module global or import, a builtin, or the runtime's alias.

``self.X`` (the first parameter of the method, however it is named) is checked against the
attributes the class and its bases assign or define: their class bodies, ``self.X = ...`` in their
methods, ``register_buffer``/``register_parameter``/``add_module``/``setattr`` with a literal name.
Bases are followed through the module and its imports into the source tree. When a base is
outside the tree (other than ``object``, ``abc.ABC``, ``typing.Generic``/``Protocol`` and
``torch.nn.Module``, whose attributes are known), or a class sets attributes dynamically, an unknown
attribute is a warning (it cannot be known), else an error. Errors name the close matches.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import symtable
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from codegen.diagnostics import Diagnostics, Pos
from codegen.resolve.classes import Classes
from codegen.resolve.context import FileContext
from codegen.resolve.sites import FilePlan
from codegen.runtime_calls import payload_call, payload_label
from codegen.spec.model import Hook, Span


@dataclass(frozen=True)
class Expression:
    """One spec expression and where it runs: before ``at``'s start or after its end."""

    text: str
    what: str
    pos: Pos
    function: cst.FunctionDef
    at: cst.CSTNode
    after: bool
    entry: Span | Hook  # whose expression it is


def check_expressions(
    context: FileContext,
    plan: FilePlan,
    alias: str,
    source_root: Path,
    diags_of: Callable[[Span | Hook], Diagnostics],
    trees: dict[str, cst.Module | None],
) -> None:
    """Report (to ``diags_of(entry)``) every free name of the plan's expressions that is not bound where it runs.

    ``trees`` caches the modules parsed to follow base classes (path -> module, None when not in
    the tree). Scopes come from the standard library's ``symtable`` and binding sites from
    ``ast`` over the same text (the file's context pairs them with the libcst statements)."""
    expressions = list(_expressions(plan, alias))
    if not expressions:
        return
    try:
        scopes = _Scopes(context)
    except (SyntaxError, ValueError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        diags_of(expressions[0].entry).error(
            expressions[0].pos,
            f"cannot check the expressions inserted into {plan.path}: Python "
            f"{sys.version_info.major}.{sys.version_info.minor} cannot parse it ({reason})",
        )
        return
    checker = _Checker(context, plan, alias, scopes, Classes(source_root, trees), diags_of)
    for expression in expressions:
        checker.check(expression)


@dataclass
class _Scope:
    """A function, class or the module, as ``symtable`` and ``ast`` see it."""

    table: symtable.SymbolTable
    node: ast.AST
    parent: _Scope | None
    _sites: dict[str, list[tuple[int, int]]] | None = None

    @property
    def function(self) -> bool:
        return isinstance(self.node, (ast.FunctionDef, ast.AsyncFunctionDef))

    def _symbol(self, name: str) -> symtable.Symbol | None:
        try:
            return self.table.lookup(name)
        except KeyError:
            return None

    def local(self, name: str) -> bool:
        """Whether ``name`` is bound in this function (parameter, assignment, import, def)."""
        symbol = self._symbol(name)
        return symbol is not None and symbol.is_local()

    def declared_global(self, name: str) -> bool:
        symbol = self._symbol(name)
        return symbol is not None and symbol.is_declared_global()

    def locals(self) -> set[str]:
        return {s.get_name() for s in self.table.get_symbols() if s.is_local()}

    def sites(self) -> dict[str, list[tuple[int, int]]]:
        """Where each name is bound in this function: (line, column), in source order."""
        if self._sites is None:
            self._sites = _binding_sites(self.node)
        return self._sites


class _Scopes:
    """Every function and class scope of a module, by the id of its ``ast`` node."""

    def __init__(self, context: FileContext) -> None:
        tree, table = context.tree(), context.symbols()
        self.module = _Scope(table, tree, None)
        self.by_node: dict[int, _Scope] = {}
        self._add(self.module, tree.body)
        self.globals = {s.get_name() for s in table.get_symbols() if s.is_local()}
        self._declared_globals(table)

    def _add(self, scope: _Scope, body: Sequence[ast.stmt]) -> None:
        tables: dict[tuple[str, int], symtable.SymbolTable] = {}
        for child in scope.table.get_children():
            tables.setdefault((child.get_name(), child.get_lineno()), child)
        for node in _scope_nodes(body):
            table = tables.get((node.name, node.lineno))
            if table is None:
                continue
            inner = _Scope(table, node, scope)
            self.by_node[id(node)] = inner
            self._add(inner, node.body)

    def _declared_globals(self, table: symtable.SymbolTable) -> None:
        for child in table.get_children():
            self.globals |= {
                s.get_name() for s in child.get_symbols() if s.is_declared_global() and s.is_assigned()
            }
            self._declared_globals(child)

    def resolve(self, name: str, scope: _Scope) -> _Scope | None:
        """The scope ``name`` is bound in, seen from the function ``scope`` (class bodies are not
        seen), the module's for a global or builtin; None when it is bound nowhere."""
        current: _Scope | None = scope
        while current is not None and current is not self.module:
            if current.function:
                if current.declared_global(name):
                    break
                if current.local(name):
                    return current
            current = current.parent
        if name in self.globals or hasattr(builtins, name):
            return self.module
        return None

    def visible(self, scope: _Scope) -> set[str]:
        """Names the enclosing functions and the module bind (class bodies are not seen)."""
        names = set(self.globals)
        current = scope.parent
        while current is not None and current is not self.module:
            if current.function:
                names |= current.locals()
            current = current.parent
        return names


def _scope_nodes(body: Sequence[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """The defs and classes a block defines, also inside its compound statements (not inside
    other defs or classes)."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node
            continue
        inner: list[ast.stmt] = []
        for name in ("body", "orelse", "finalbody"):
            inner.extend(getattr(node, name, ()))
        for holder in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
            inner.extend(holder.body)
        stack.extend(reversed(inner))


def _binding_sites(func: ast.AST) -> dict[str, list[tuple[int, int]]]:
    """Every place ``func`` binds a name in its own scope: parameters, assignment targets,
    imports, nested defs and classes, ``except ... as``, ``match`` captures, and ``:=`` (also
    inside comprehensions, whose own targets stay theirs)."""
    sites: dict[str, list[tuple[int, int]]] = {}

    def add(name: str, node: ast.AST, line: int | None = None) -> None:
        where: tuple[int, int] = (
            line or int(getattr(node, "lineno", 0)),
            int(getattr(node, "col_offset", 0)),
        )
        sites.setdefault(name, []).append(where)

    assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
    args = func.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if arg is not None:
            add(arg.arg, arg)
    stack: list[ast.AST] = list(reversed(func.body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            add(node.name, node, min((d.lineno for d in node.decorator_list), default=node.lineno))
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.NamedExpr) and isinstance(inner.target, ast.Name):
                    add(inner.target.id, inner.target)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            add(node.id, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    add(alias.asname or alias.name.partition(".")[0], node)
        elif (
            isinstance(node, ast.ExceptHandler)
            and node.name
            or isinstance(node, (ast.MatchAs, ast.MatchStar))
            and node.name
        ):
            add(node.name, node)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            add(node.rest, node)
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    for found in sites.values():
        found.sort()
    return sites


def _expressions(plan: FilePlan, alias: str) -> Iterator[Expression]:
    for wrap in plan.wraps:
        first, last = wrap.block.body[wrap.start], wrap.block.body[wrap.end - 1]
        entry, func = wrap.entry, wrap.function
        if isinstance(entry, Span):
            for attr in entry.attributes:
                yield Expression(attr.expr, f"attribute '{attr.key}'", attr.pos, func, first, False, entry)
            if entry.when:
                yield Expression(entry.when, "when", entry.when_pos or entry.pos, func, first, False, entry)
            if entry.name_expr:
                yield Expression(
                    entry.name_expr, "name_expr", entry.name_expr_pos or entry.pos, func, first, False, entry
                )
            for attr in entry.end_attributes:
                yield Expression(attr.expr, f"end attribute '{attr.key}'", attr.pos, func, last, True, entry)
        else:
            if entry.enter:
                yield Expression(entry.enter.text, "enter", entry.enter.pos, func, first, False, entry)
            if entry.exit:
                yield Expression(entry.exit.text, "exit", entry.exit.pos, func, last, True, entry)
    for insert in plan.inserts:
        hook = insert.hook
        body = insert.block.body
        at, after = (body[insert.index], False) if insert.index < len(body) else (body[-1], True)
        payload = hook.payload
        call = payload_call(payload, alias)
        yield Expression(call, payload_label(payload), payload.pos, insert.function, at, after, hook)
    for rewrite in plan.rewrites:
        wrap_hook = rewrite.hook
        yield Expression(
            wrap_hook.wrapper,
            "with",
            wrap_hook.wrapper_pos,
            rewrite.function,
            rewrite.statement,
            False,
            wrap_hook,
        )


@dataclass(frozen=True)
class _Free:
    name: str
    attributes: tuple[str, ...]  # X of every ``name.X`` in the expression


def free_names(text: str) -> list[_Free] | None:
    """The names ``text`` reads without binding them itself (not builtins), with the attributes
    read from each; None when Python cannot parse it (``symtable`` does the scoping)."""
    source = text.strip() + "\n"
    try:
        tree = ast.parse(source)
        table = symtable.symtable(source, "<expression>", "exec")
    except (SyntaxError, ValueError):
        return None
    bound = {s.get_name() for s in table.get_symbols() if s.is_local()}
    names = {s.get_name() for s in table.get_symbols() if s.is_referenced() and not s.is_local()}
    pending = list(table.get_children())
    while pending:  # lambdas and comprehensions: what they read from the top level
        inner = pending.pop()
        names |= {s.get_name() for s in inner.get_symbols() if s.is_global() and s.is_referenced()}
        pending.extend(inner.get_children())
    free = {n for n in names - bound if not hasattr(builtins, n)}
    attributes: dict[str, dict[str, None]] = {n: {} for n in free}

    def visit(node: ast.AST, shadowed: frozenset[str]) -> None:
        if isinstance(node, ast.Lambda):
            args = node.args
            every = (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
            shadowed = shadowed | {a.arg for a in every if a is not None}
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            shadowed = shadowed | {
                n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
            }
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in free
            and node.value.id not in shadowed
        ):
            attributes[node.value.id][node.attr] = None
        for child in ast.iter_child_nodes(node):
            visit(child, shadowed)

    visit(tree, frozenset())
    return [_Free(name, tuple(attributes[name])) for name in sorted(free)]


class _Checker:
    def __init__(
        self,
        context: FileContext,
        plan: FilePlan,
        alias: str,
        scopes: _Scopes,
        classes: Classes,
        diags_of: Callable[[Span | Hook], Diagnostics],
    ) -> None:
        self.context = context
        self.plan = plan
        self.alias = alias
        self.scopes = scopes
        self.classes = classes
        self.diags_of = diags_of

    def _point(self, at: cst.CSTNode, after: bool) -> tuple[int, int] | None:
        """Where ``at`` starts, or ends with ``after``, as (line, column) of the ``ast``."""
        nodes = self.context.ast_of(at)
        if not nodes:
            return None
        if after:
            last = nodes[-1]
            return (last.end_lineno or last.lineno, last.end_col_offset or 0)
        first = nodes[0]
        decorators = getattr(first, "decorator_list", [])
        return (min(d.lineno for d in decorators), 0) if decorators else (first.lineno, first.col_offset)

    def check(self, expr: Expression) -> None:
        free = free_names(expr.text)
        if free is None:
            return
        found = self.context.ast_of(expr.function)
        scope = self.scopes.by_node.get(id(found[0])) if found else None
        point = self._point(expr.at, expr.after)
        if scope is None or point is None:
            return
        func = expr.function.name.value
        for item in free:
            if item.name == self.alias:
                continue
            bound = self.scopes.resolve(item.name, scope)
            if bound is None:
                hint = self._hint(item.name, scope, point)
                self.diags_of(expr.entry).error(
                    expr.pos,
                    f"{expr.what}: '{item.name}' is not defined in {func} "
                    f"({self.plan.path} line {self.context.line(expr.at, expr.after)}){hint}",
                )
                continue
            local = scope.sites().get(item.name, []) if bound is scope else []
            if local and not any(site < point for site in local):
                self.diags_of(expr.entry).error(
                    expr.pos,
                    f"{expr.what}: '{item.name}' is assigned in {func} only after this point "
                    f"({self.plan.path} line {self.context.line(expr.at, expr.after)}; first assigned at "
                    f"line {local[0][0]}): it would be unbound",
                )
                continue
            if item.attributes and bound is not self.scopes.module:
                self._check_self(expr, item, bound)

    def _hint(self, name: str, scope: _Scope, point: tuple[int, int]) -> str:
        """Close matches among the names visible at ``point`` (class bodies are not)."""
        local = {n for n, sites in scope.sites().items() if scope.local(n) and sites[0] < point}
        hint = _did_you_mean(name, {self.alias} | local | self.scopes.visible(scope))
        if hint:
            return hint
        if not local:
            return ""
        shown = ", ".join(sorted(local)[:12]) + (", ..." if len(local) > 12 else "")
        return f"; bound there: {shown} (and the module's names)"

    def _check_self(self, expr: Expression, item: _Free, method: _Scope) -> None:
        """``name.X`` where ``name`` is the first parameter of a method: X must be an attribute."""
        node = method.node
        owner = method.parent
        if owner is None or not isinstance(owner.node, ast.ClassDef):
            return
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not _is_instance_method(node):
            return
        params = node.args.posonlyargs or node.args.args
        if not params or params[0].arg != item.name or len(method.sites().get(item.name, [])) != 1:
            return
        classdef = self.context.cst_of(owner.node)
        if not isinstance(classdef, cst.ClassDef):
            return
        facts = self.classes.facts(self.plan.path, self.plan.module, classdef)
        for attr in item.attributes:
            if attr in facts.attributes or (attr.startswith("__") and attr.endswith("__")):
                continue
            where = f"{item.name}.{attr}"
            if facts.unknown:
                self.diags_of(expr.entry).warning(
                    expr.pos,
                    f"{expr.what}: cannot check '{where}': {classdef.name.value} is not assigned '{attr}' "
                    f"in the source tree, but {'; '.join(facts.unknown)}",
                )
            else:
                self.diags_of(expr.entry).error(
                    expr.pos,
                    f"{expr.what}: '{where}' is not an attribute of {classdef.name.value} or its bases"
                    f"{_did_you_mean(attr, facts.attributes)}",
                )


def _is_instance_method(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    names = {_dotted(d) for d in func.decorator_list}
    return not names & {"staticmethod", "classmethod"}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _did_you_mean(name: str, candidates: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=3, cutoff=0.7)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
