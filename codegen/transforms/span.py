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

from codegen.runtime_calls import bind, quote
from codegen.spec.model import Attribute, Project, Span
from codegen.transforms.render import LINE_LENGTH, DictArg, call_statement


def span_start(project: Project, span: Span, var: str, indent: str, step: str) -> str:
    runtime = project.runtime
    alias = runtime.binding  # the spec's expressions name the runtime as ``runtime.alias``
    name = bind(span.name_expr, runtime.alias, alias) if span.name_expr else quote(span.name)
    args: list[str | DictArg] = [name]
    if span.attributes:
        args.append(dict_arg(project, span.attributes))
    when = [bind(span.when, runtime.alias, alias)] if span.when else []
    guards = [f"{alias}.{project.group(span.group).flag}"] + when
    prefix = f"{var} = {' and '.join(guards)} and {alias}.start_span"
    if len(f"{indent}{prefix}(") <= LINE_LENGTH:
        return call_statement(prefix, args, indent, step)
    # black's fallback: the right-hand side in parentheses, one operand per line
    inner = indent + step
    lines = [f"{indent}{var} = (", f"{inner}{guards[0]}"] + [f"{inner}and {g}" for g in guards[1:]]
    lines.append(call_statement(f"and {alias}.start_span", args, inner, step))
    lines.append(f"{indent})")
    return "\n".join(lines)


def span_decorator(project: Project, span: Span) -> str:
    """``otel.traced("name", {"attribute": "parameter"})``: the decorator form, for cold functions."""
    args = [quote(span.name)]
    if span.attributes:
        pairs = ", ".join(f"{quote(a.key)}: {quote(a.expr)}" for a in span.attributes)
        args.append("{" + pairs + "}")
    return f"{project.runtime.binding}.traced({', '.join(args)})"


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
