"""Wrap a run of statements in a span, in place.

The covered statements stay where they are (a docstring stays first, ``super()`` and ``nonlocal``
keep working) inside ``try``/``finally``; the guard is a module-attribute read, so a disabled group
costs one attribute load and never evaluates an attribute expression::

    _otel_span = otel.LAYER and otel.start_span("megatron.layer.mlp")
    try:
        output = self._forward_mlp(hidden_states)
    finally:
        _otel_span and _otel_span.end()
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from codegen.layout import DictArg, call_statement, decorator, guarded_assignment, quote
from codegen.spec.model import Attribute, Project, Span


def span_start(project: Project, span: Span, var: str, indent: str, step: str) -> str:
    alias = project.runtime.alias
    name = span.name_expr if span.name_expr else quote(span.name)
    args: list[str | DictArg] = [name]
    if span.attributes:
        args.append(dict_arg(span.attributes))
    guards = [f"{alias}.{project.group(span.group).flag}"] + ([span.when] if span.when else [])
    return guarded_assignment(var, guards, f"{alias}.start_span", args, indent, step)


def span_decorator(project: Project, span: Span, indent: str, step: str) -> cst.Decorator:
    """``@otel.traced("name", {"attribute": "parameter"})``: the decorator form, for cold functions."""
    args: list[str | DictArg] = [quote(span.name)]
    if span.attributes:
        args.append(DictArg(tuple((quote(a.key), quote(a.expr)) for a in span.attributes), lazy=False))
    return decorator(f"{project.runtime.alias}.traced", args, indent, step)


def span_setter(span: Span, var: str, indent: str, step: str) -> str | None:
    if not span.end_attributes:
        return None
    return call_statement(f"{var} and {var}.set_attributes", [dict_arg(span.end_attributes)], indent, step)


def span_end(var: str, indent: str) -> str:
    return f"{indent}{var} and {var}.end()"


def dict_arg(attributes: Sequence[Attribute]) -> DictArg:
    return DictArg.of_strings([(a.key, a.expr) for a in attributes])
