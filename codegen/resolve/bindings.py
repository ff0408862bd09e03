"""Every binding of the runtime's name that the generated code would see instead of the runtime.

The generated code reads the runtime by the name instrumented files import it as
(``Runtime.binding``, ``_otel``; the specs' own name for it, ``otel``, is rewritten to that and
may be any other thing in the file) inside the instrumented function (or, for the decorator form,
in the scope holding the ``def``). Python resolves it to the first scope that binds it: the
function itself (any binding anywhere in it makes the name local, so a read before that binding
raises ``UnboundLocalError``), the enclosing functions (class bodies are skipped), then the
module. Each of these must leave the name to the module's ``import RUNTIME as _otel``.

libcst's scope analysis records assignments, imports (``import otel.sub`` binds ``otel``),
``def``/``class`` names, ``with``/``except``/``for`` targets, walrus and annotated assignments,
and redirects ``global``/``nonlocal`` names to the scope they name. It does not record ``match``
captures or ``del`` (which also makes a name local), and it keeps a walrus inside a
comprehension in the comprehension's scope; those are added here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import (
    Assignment,
    ClassScope,
    ComprehensionScope,
    FunctionScope,
    GlobalScope,
    MetadataWrapper,
    Scope,
    ScopeProvider,
)

from codegen.layout import code_of


@dataclass(frozen=True)
class Shadow:
    """A binding of the runtime's name that the generated code in a function would see."""

    node: cst.CSTNode
    where: str  # "function", "enclosing", "class" or "module"
    scope_name: str  # the function or class that binds it ("" for the module)


class Bindings:
    """The scope analysis of one module, computed only when the module mentions the name at all
    (a module that never spells the name cannot bind it; the analysis costs about a parse)."""

    def __init__(self, module: cst.Module, source: str, alias: str, runtime_module: str) -> None:
        self.alias = alias  # the name the generated code reads the runtime by
        self.runtime_module = runtime_module
        self.module = module
        self._scopes: dict[cst.CSTNode, Scope | None] | None = None
        self._extra: dict[Scope, list[cst.CSTNode]] = {}
        self.mentioned = re.search(rf"(?<![\w.]){re.escape(alias)}\b", source) is not None

    def _resolve(self) -> dict[cst.CSTNode, Scope | None]:
        if self._scopes is None:
            wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            self._scopes = dict(wrapper.resolve(ScopeProvider))
            collector = _Unrecorded(self.alias)
            self.module.visit(collector)
            for node in collector.found:
                scope = self._scopes.get(node)
                if scope is not None:
                    self._extra.setdefault(_target_scope(scope, self.alias), []).append(node)
        return self._scopes

    def _bindings(self, scope: Scope) -> list[cst.CSTNode]:
        found = [
            a.node
            for a in scope.assignments
            if a.name.split(".")[0] == self.alias and isinstance(a, Assignment)
        ]
        return found + self._extra.get(scope, [])

    def _ours(self, node: cst.CSTNode) -> bool:
        """The runtime import itself: ``import RUNTIME as ALIAS``."""
        if not isinstance(node, cst.Import):
            return False
        return any(
            code_of(a.name) == self.runtime_module
            and a.asname is not None
            and isinstance(a.asname.name, cst.Name)
            and a.asname.name.value == self.alias
            for a in node.names
        )

    def module_shadow(self) -> cst.CSTNode | None:
        """A module-level binding other than the runtime import (``global`` ones in functions too)."""
        if not self.mentioned:
            return None
        scopes = self._resolve()
        scope = scopes.get(self.module.body[0]) if self.module.body else None
        if scope is None:
            return None
        others = [n for n in self._bindings(scope) if not self._ours(n)]
        return min(others, key=_order(self.module)) if others else None

    def shadow(self, func: cst.FunctionDef, decorator: bool) -> Shadow | None:
        """The first binding in ``func`` (or, for a decorator, in the scope holding the ``def``) or
        in an enclosing function that the generated code would resolve the name to."""
        if not self.mentioned:
            return None
        scopes = self._resolve()
        if decorator:
            scope = scopes.get(func)
        else:
            body = func.body
            inner = body.body[0] if isinstance(body, cst.IndentedBlock) and body.body else None
            scope = scopes.get(inner) if inner is not None else None
        first = True
        while scope is not None and not isinstance(scope, GlobalScope):
            if isinstance(scope, (FunctionScope, ClassScope)) and (first or isinstance(scope, FunctionScope)):
                found = self._bindings(scope)
                if found:
                    where = "function" if first and not decorator else "enclosing"
                    if isinstance(scope, ClassScope):
                        where = "class"
                    return Shadow(found[0], where, getattr(scope, "name", "") or "")
            first = False
            scope = scope.parent
        return None


def _target_scope(scope: Scope, name: str) -> Scope:
    """The scope a binding in ``scope`` lands in: out of comprehensions (a walrus there binds
    in the enclosing scope), following ``global``/``nonlocal``."""
    while isinstance(scope, ComprehensionScope):
        scope = scope.parent
    overwrites: dict[str, Scope] = getattr(scope, "_scope_overwrites", {})
    return overwrites.get(name, scope)


def _order(module: cst.Module) -> Callable[[cst.CSTNode], int]:
    """Source order of nodes (without position metadata): their index in a depth-first walk."""
    index: dict[int, int] = {}

    class _Numbering(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            index[id(node)] = len(index)
            return True

    module.visit(_Numbering())
    return lambda node: index.get(id(node), 0)


class _Unrecorded(cst.CSTVisitor):
    """Bindings libcst's scope analysis leaves out: ``match`` captures and ``del`` targets."""

    def __init__(self, alias: str) -> None:
        super().__init__()
        self.alias = alias
        self.found: list[cst.CSTNode] = []

    def _capture(self, node: cst.MatchAs | cst.MatchStar) -> None:
        if node.name is not None and node.name.value == self.alias:
            self.found.append(node)

    visit_MatchAs = visit_MatchStar = _capture

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        if node.rest is not None and node.rest.value == self.alias:
            self.found.append(node)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        # recorded, but in the comprehension's scope when inside one; it binds the enclosing one
        if isinstance(node.target, cst.Name) and node.target.value == self.alias:
            self.found.append(node)

    def visit_Del(self, node: cst.Del) -> None:
        targets: list[cst.BaseExpression] = [node.target]
        while targets:
            target = targets.pop()
            if isinstance(target, cst.Name) and target.value == self.alias:
                self.found.append(node)
            elif isinstance(target, (cst.Tuple, cst.List)):
                targets.extend(e.value for e in target.elements)
