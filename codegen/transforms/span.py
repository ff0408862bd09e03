"""Wrap a run of statements in a span, in place.

The covered statements stay where they are (a docstring stays first, ``super()`` and ``nonlocal``
keep working) inside ``try``/``finally``; the guard is a module-attribute read, so a disabled group
costs one attribute load and never evaluates an attribute expression::

    _otel_span = _otel.LAYER and _otel.start_span("megatron.layer.mlp")
    try:
        output = self._forward_mlp(hidden_states)
    finally:
        _otel_span and _otel_span.end()
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from codegen.layout import DictArg, call_statement, decorator, guarded_assignment, quote
from codegen.runtime_calls import bind
from codegen.spec.model import Attribute, Project, Span


def span_start(project: Project, span: Span, var: str, indent: str, step: str, at_exit: bool = False) -> str:
    """``var = ALIAS.FLAG and ALIAS.start_span(...)``. ``at_exit`` (a ``__del__``, which may run
    while the interpreter clears the modules at exit, the runtime's name set to None first):
    ``ALIAS and`` in front, so that the body then runs as the pristine one does."""
    runtime = project.runtime
    alias = runtime.binding  # the spec's expressions name the runtime as ``runtime.alias``
    name = bind(span.name_expr, runtime.alias, alias) if span.name_expr else quote(span.name)
    args: list[str | DictArg] = [name]
    if span.attributes:
        args.append(dict_arg(project, span.attributes))
    when = [bind(span.when, runtime.alias, alias)] if span.when else []
    guards = [alias] * at_exit + [f"{alias}.{project.group(span.group).flag}"] + when
    return guarded_assignment(var, guards, f"{alias}.start_span", args, indent, step)


def span_decorator(project: Project, span: Span, indent: str, step: str) -> cst.Decorator:
    """``@otel.traced("name", {"attribute": "parameter"})``: the decorator form, for cold functions."""
    args: list[str | DictArg] = [quote(span.name)]
    if span.attributes:
        args.append(DictArg(tuple((quote(a.key), quote(a.expr)) for a in span.attributes), lazy=False))
    return decorator(f"{project.runtime.binding}.traced", args, indent, step)


def span_setter(project: Project, span: Span, var: str, indent: str, step: str) -> str | None:
    if not span.end_attributes:
        return None
    args = [dict_arg(project, span.end_attributes)]
    return call_statement(f"{var} and {var}.set_attributes", args, indent, step)


def span_end(var: str, indent: str) -> str:
    return f"{indent}{var} and {var}.end()"


def dict_arg(project: Project, attributes: Sequence[Attribute]) -> DictArg:
    """``lambda: {"key": expr, ...}``, each expression naming the runtime as the code imports it."""
    alias, binding = project.runtime.alias, project.runtime.binding
    return DictArg.of_strings([(a.key, bind(a.expr, alias, binding)) for a in attributes])
