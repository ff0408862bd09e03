"""Render the documentation pages (``templates/docs/*.md.j2``) from the spec model and the plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from codegen.emit.coverage import coverage_context
from codegen.emit.markdown import cell, code_cell, code_list
from codegen.emit.svg import hierarchy_svg
from codegen.emit.templating import environment
from codegen.resolve.hierarchy import parents_of
from codegen.resolve.sites import Plan
from codegen.spec.model import Attribute, Project, Span

DOC_SUFFIX = ".md.j2"
HIERARCHY_SVG = "hierarchy.svg"  # the picture hierarchy.md shows


@dataclass(frozen=True)
class SpanRow:
    name: str
    group: str
    where: str
    covers: str
    attributes: str
    parents: str


def _attributes(span: Span) -> str:
    def fmt(a: Attribute, when: str) -> str:
        return f"{code_cell(a.key)} = {code_cell(a.expr)}{when}"

    parts = [fmt(a, "") for a in span.attributes]
    parts += [fmt(a, " (at the end)") for a in span.end_attributes]
    if span.goodput:
        parts.append("`is_goodput_span` = `True`")
    return "<br>".join(parts) if parts else "–"


def _covers(span: Span) -> str:
    text = cell(span.region.describe())
    if span.when:
        text += f", only when {code_cell(span.when)}"
    if span.note:
        text += f"<br>{cell(span.note)}"
    return text


def render_docs(
    project: Project, plan: Plan, templates_dir: Path, full: Project | None = None
) -> dict[str, str]:
    """Return ``{file name: text}`` for every docs page. ``project`` is what applies to the tree's
    release; ``full`` (default: the same) every entry of the specs, for the coverage page."""
    env = environment(templates_dir)
    parents = parents_of(project, plan)
    rows = _span_rows(project, plan, parents)
    by_group = {g.name: [r.name for r in rows if r.group == g.name] for g in project.groups}
    groups = [
        {
            "name": g.name,
            "flag": g.flag,
            "description": cell(g.description),
            "spans": code_list(dict.fromkeys(by_group[g.name])),
        }
        for g in project.groups
    ]
    presets = [
        {
            "name": p.name,
            "groups": ", ".join(project.expand_preset(p.name)),
            "description": cell(p.description),
        }
        for p in project.presets
    ]
    tree, picture = _hierarchy(project, parents, {r.name: r.group for r in rows})
    context = {
        "spans": rows,
        "groups": groups,
        "presets": presets,
        "tree": tree,
        "metrics": project.metrics,
        "env": project.env,
        "flags": project.flags,
        "md": cell,
        "compat": [(a.key, cell(a.compat)) for a in project.attributes if a.compat],
        "coverage": coverage_context(full or project),
    }
    docs_dir = templates_dir / "docs"
    out: dict[str, str] = {}
    for template in sorted(p.name for p in docs_dir.iterdir() if p.name.endswith(DOC_SUFFIX)):
        out[template[: -len(".j2")]] = env.get_template(f"docs/{template}").render(context)
    out[HIERARCHY_SVG] = hierarchy_svg(picture, [g.name for g in project.groups])
    return out


def _span_rows(project: Project, plan: Plan, parents: Mapping[str, Sequence[str]]) -> list[SpanRow]:
    """One row of the spans table per span name, the runtime's lifecycle spans last."""

    def parent_text(name: str) -> str:
        return code_list(parents[name], "(root)")

    rows: list[SpanRow] = []
    for span in project.spans:
        for name in span.names or (span.name,):
            rows.append(
                SpanRow(
                    name,
                    span.group,
                    f"{code_cell(span.file)}<br>{code_cell(span.function)}",
                    _covers(plan.as_resolved(span)),
                    _attributes(span),
                    parent_text(name),
                )
            )
    for life in project.lifecycle:
        backdated = f"backdated: {code_cell(str(life.start))} to {code_cell(str(life.end))}"
        covers = {
            "startup": "program start to just before the training loop",
            "phase": backdated,
            "pre_startup": f"{backdated}; a root of its own",
            "interval": "save_interval iterations of the training loop",
        }[life.role]
        parts = [f"{code_cell(key)}: {cell(what)}" for key, what in life.attributes]
        if life.goodput:
            parts.append("`is_goodput_span` = `True`")
        attributes = "<br>".join(parts) or "–"
        rows.append(SpanRow(life.name, life.group, "runtime", covers, attributes, parent_text(life.name)))
    return rows


def _hierarchy(
    project: Project, parents: Mapping[str, Sequence[str]], group_of: Mapping[str, str]
) -> tuple[list[str], list[tuple[int, str, str]]]:
    """The span tree as Markdown list lines, and as (depth, name, group) rows for the picture."""
    children: dict[str, list[str]] = {}
    for name, found in parents.items():
        for parent in found:
            children.setdefault(parent, []).append(name)
    tree: list[str] = []
    picture: list[tuple[int, str, str]] = []

    def walk(name: str, depth: int, path: tuple[str, ...]) -> None:
        tree.append(f"{'  ' * depth}- `{name}`")
        picture.append((depth, name, group_of.get(name, "")))
        for child in dict.fromkeys(children.get(name, [])):
            if child not in path:
                walk(child, depth + 1, path + (child,))

    for name in project.all_span_names():
        if not parents[name]:
            walk(name, 0, (name,))
    return tree, picture
