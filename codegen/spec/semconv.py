"""The semantic-convention analysis of the specs: every attribute key with its type (declared under
``attributes:`` or shown by its expression, :func:`infer_type`), and the names that break the
semconv naming rules, reported as warnings (``codegen validate``/``apply``; errors with
``--strict``), except an attribute declared with ``compat:`` (a name kept for compatibility, e.g.
with #6438: the docs list it). The registry (``emit/registry.py``) and ``codegen verify`` read it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from codegen.diagnostics import Pos
from codegen.spec.attributes import infer_type
from codegen.spec.model import EntryHook, Project, Stamp, StatementHook, WrapHook, WrapResult

# Set by the runtime on every span it starts (not declared in the specs).
RUNTIME_ATTRIBUTES = {
    "megatron.span_group": ("string", "The span group (see the groups page) the span belongs to."),
    "is_goodput_span": ("boolean", "Set (true) on spans that count towards goodput."),
}
_SEGMENT = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


@dataclass
class AttributeInfo:
    key: str
    pos: Pos | None
    type: str | None = None
    brief: str = ""
    note: str = ""
    compat: str = ""
    compat_pos: Pos | None = None
    expressions: list[tuple[str, Pos]] = field(default_factory=list)


def naming_problem(name: str, namespaced: bool) -> str | None:
    """Why ``name`` breaks the semconv naming rules (lowercase, dot-separated namespaces,
    snake_case segments; an attribute needs a namespace), or None."""
    segments = name.split(".")
    bad = [s for s in segments if not _SEGMENT.fullmatch(s)]
    if bad:
        return f"segment '{bad[0]}' is not lowercase snake_case"
    if namespaced and len(segments) < 2:
        return "it has no namespace (expected e.g. 'megatron." + name + "')"
    return None


def attribute_table(project: Project) -> tuple[dict[str, AttributeInfo], dict[str, list[tuple[str, str]]]]:
    """Every attribute key with what the specs say of it; each span name's (key, requirement)."""
    table: dict[str, AttributeInfo] = {}
    spans: dict[str, list[tuple[str, str]]] = {}

    def use(key: str, pos: Pos, expr: str | None = None, brief: str = "") -> AttributeInfo:
        entry = table.setdefault(key, AttributeInfo(key, pos))
        if expr is not None:
            entry.expressions.append((expr, pos))
        entry.brief = entry.brief or brief
        return entry

    for span in project.spans:
        refs = [(a.key, "required") for a in span.attributes]
        refs += [(a.key, "recommended") for a in span.end_attributes]
        for attr in (*span.attributes, *span.end_attributes):
            use(attr.key, attr.pos, attr.expr)
        for name in span.names or (span.name,):
            spans.setdefault(name, [])
            spans[name] += [r for r in refs if r not in spans[name]]
    for life in project.lifecycle:
        spans.setdefault(life.name, [])
        for key, what in life.attributes:
            use(key, life.pos, brief=what[:1].upper() + what[1:])
            spans[life.name].append((key, "recommended"))
    for hook in project.hooks:
        match hook:
            case (
                EntryHook(payload=Stamp(attributes=stamped))
                | StatementHook(payload=Stamp(attributes=stamped))
            ):
                for attr in stamped:
                    use(attr.key, hook.pos)
            case WrapHook(target=WrapResult(key=key)):
                use(key, hook.pos)
    for decl in project.attributes:
        entry = table.get(decl.key)
        if entry is None:
            entry = table[decl.key] = AttributeInfo(decl.key, decl.pos)
        entry.type, entry.brief, entry.note = decl.type, decl.brief or entry.brief, decl.note
        if decl.compat:
            entry.compat, entry.compat_pos = decl.compat, decl.pos
    for entry in table.values():
        if entry.type is None:
            inferred = {infer_type(expr) for expr, _ in entry.expressions}
            if len(inferred) == 1 and None not in inferred:
                entry.type = inferred.pop()
    return table, spans


def spec_warnings(project: Project) -> list[tuple[Pos, str]]:
    """Span, attribute and metric names that break the semconv naming rules, and attributes with
    no type (neither declared under ``attributes:`` nor shown by their expression)."""
    found: list[tuple[Pos, str]] = []
    table, _ = attribute_table(project)
    for entry in table.values():
        if entry.type is None and entry.key not in RUNTIME_ATTRIBUTES and entry.pos is not None:
            found.append(
                (
                    entry.pos,
                    (
                        f"attribute '{entry.key}' has no type: declare it under 'attributes:' "
                        "(e.g. {type: int, brief: ...}); the registry says 'any'"
                    ),
                )
            )
        problem = naming_problem(entry.key, namespaced=True)
        if entry.compat and not problem and entry.compat_pos is not None:
            unneeded = f"attribute '{entry.key}' has 'compat:' but its name breaks no semconv naming rule"
            found.append((entry.compat_pos, unneeded + ": remove 'compat:'"))
        elif problem and not entry.compat and entry.pos is not None:
            found.append(
                (entry.pos, f"attribute name '{entry.key}' breaks the semconv naming rules: {problem}")
            )
    for span in project.spans:
        for name in span.names or (span.name,):
            problem = naming_problem(name, namespaced=False)
            if problem:
                found.append((span.pos, f"span name '{name}' breaks the semconv naming rules: {problem}"))
    for metric in project.metrics:
        problem = naming_problem(metric.name, namespaced=True)
        if problem:
            found.append(
                (metric.pos, f"metric name '{metric.name}' breaks the semconv naming rules: {problem}")
            )
    return sorted(set(found), key=lambda item: (item[0].path, item[0].line, item[0].col, item[1]))


def attribute_types(project: Project) -> dict[str, str]:
    """Attribute key -> its registry type (``codegen verify`` checks captured values against it)."""
    table, _ = attribute_table(project)
    types = {key: kind for key, (kind, _) in RUNTIME_ATTRIBUTES.items()}
    types.update({key: entry.type for key, entry in table.items() if entry.type})
    return types
