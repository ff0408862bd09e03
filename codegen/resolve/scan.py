"""What resolution asks of a function, gathered in one walk: which names are taken, whether it
yields."""

from __future__ import annotations

import libcst as cst

from codegen.resolve.functions import unsafe_reason
from codegen.resolve.walk import bound_targets, children, nested_scope
from codegen.runtime_calls import SPAN_VARIABLE


class Facts:
    """What resolution asks of each function, gathered in one walk: a function such as ``train``
    holds dozens of specs' statements, and each question is otherwise a walk over its whole tree."""

    def __init__(self, binding: str, aliases: dict[str, str] | None = None) -> None:
        self.binding = binding  # the name generated code reads the runtime by (``_otel``)
        self.aliases = aliases or {}
        self._scans: dict[int, _Scan] = {}

    def _scan(self, func: cst.FunctionDef) -> _Scan:
        scan = self._scans.get(id(func))
        if scan is None:
            scan = self._scans[id(func)] = _Scan(func, self.binding)
        return scan

    def unsafe(self, func: cst.FunctionDef) -> str | None:
        return unsafe_reason(func, is_generator=self._scan(func).generator, aliases=self.aliases)

    def taken_names(self, func: cst.FunctionDef) -> set[str]:
        """``_otel_span*`` names (and ``_otel``, the runtime's binding) the function uses although no
        span of ours is in it yet."""
        scan = self._scan(func)
        return scan.span_names


class _Scan:
    """One walk of a function: does it yield (outside nested defs and lambdas), which
    ``_otel_span*`` names (and the runtime's binding) does it use as names of its own scope or of
    a scope it reads from. Not counted, as Python's scoping says none of them is that name: an
    attribute (``self._otel``), a keyword argument's name (``f(_otel=1)``), a lambda's parameters
    and a comprehension's variables where that lambda or comprehension uses them (no inserted code
    is ever inside one)."""

    def __init__(self, func: cst.FunctionDef, binding: str) -> None:
        self.generator = False
        self.span_names: set[str] = set()
        none: frozenset[str] = frozenset()
        stack: list[tuple[cst.CSTNode, bool, frozenset[str]]] = [(func, False, none)]
        while stack:
            node, nested, hidden = stack.pop()
            if isinstance(node, cst.Name):
                value = node.value
                if (value.startswith(SPAN_VARIABLE) or value == binding) and value not in hidden:
                    self.span_names.add(value)
                continue
            if isinstance(node, cst.Yield) and not nested:
                self.generator = True
            inner = nested or (node is not func and nested_scope(node))
            if isinstance(node, cst.Attribute):  # ``x._otel``: only ``x`` is a name
                stack.append((node.value, inner, hidden))
                continue
            if isinstance(node, cst.Arg):  # ``f(_otel=1)``: the keyword is no name of this scope
                stack.append((node.value, inner, hidden))
                continue
            if isinstance(node, cst.Lambda):
                hidden = hidden | _parameter_names(node.params)
            elif isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                hidden = hidden | _comprehension_targets(node.for_in)
            stack.extend((child, inner, hidden) for child in children(node))


def _parameter_names(params: cst.Parameters) -> frozenset[str]:
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            every.append(star)
    return frozenset(p.name.value for p in every)


def _comprehension_targets(comp_for: cst.CompFor | None) -> frozenset[str]:
    """The names every ``for`` of a comprehension binds (its own, not the enclosing scope's)."""
    names: set[str] = set()
    while comp_for is not None:
        names.update(t.value for t in bound_targets(comp_for) if isinstance(t, cst.Name))
        comp_for = comp_for.inner_for_in
    return frozenset(names)
