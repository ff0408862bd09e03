"""Which span runs inside which: static nesting from the plan, declared parents, lifecycle roles."""

from __future__ import annotations

from codegen.resolve.sites import Plan, Wrap
from codegen.spec.model import Hook, Project, Span


def _span_names(entry: Span | Hook) -> tuple[str, ...]:
    return (entry.names or (entry.name,)) if isinstance(entry, Span) else ()


def static_parents(plan: Plan) -> dict[str, set[str]]:
    """Span name -> names of the spans whose covered statements contain it in the same function."""
    parents: dict[str, set[str]] = {}
    for file_plan in plan.files.values():
        spans = [w for w in file_plan.wraps if isinstance(w.entry, Span)]
        order = {id(w): i for i, w in enumerate(spans)}

        def contains(outer: Wrap, inner: Wrap, order: dict[int, int] = order) -> bool:
            return outer.contains(inner, order[id(outer)] < order[id(inner)])

        decorated = {id(func): span for span, func in file_plan.decorations}
        for inner in spans:
            enclosing = [o for o in spans if contains(o, inner)]
            if not enclosing:
                outer = decorated.get(id(inner.function))
                if outer is not None:
                    for name in _span_names(inner.entry):
                        parents.setdefault(name, set()).update(_span_names(outer))
                continue
            nearest = max(enclosing, key=lambda o: sum(contains(e, o) for e in enclosing))
            for name in _span_names(inner.entry):
                parents.setdefault(name, set()).update(_span_names(nearest.entry))
    return parents


def parents_of(project: Project, plan: Plan) -> dict[str, tuple[str, ...]]:
    """Every span name -> the spans it can run inside (empty for roots), in declaration order."""
    result: dict[str, set[str]] = {name: set() for name in project.all_span_names()}
    for name, found in static_parents(plan).items():
        result[name].update(found)
    for span in project.spans:
        for name in _span_names(span):
            # a declared parent the release lacks (its ``releases:`` exclude it) is left out
            result[name].update(p for p in span.parents_of(name) if p in result)
    startup = next((s.name for s in project.lifecycle if s.role == "startup"), None)
    for life in project.lifecycle:
        if life.role == "phase" and startup is not None:
            result[life.name].add(startup)
    order = {name: i for i, name in enumerate(project.all_span_names())}
    return {name: tuple(sorted(found, key=lambda n: order[n])) for name, found in result.items()}
