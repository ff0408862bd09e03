"""Render the documentation pages (``templates/docs/*.md.j2``) from the spec model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from codegen.spec.model import Attribute, Project, Span

DOC_SUFFIX = ".md.j2"


@dataclass(frozen=True)
class SpanRow:
    name: str
    group: str
    file: str
    function: str
    covers: str
    attributes: str


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _attributes(span: Span) -> str:
    def fmt(a: Attribute, when: str) -> str:
        return f"`{a.key}` = `{_md(a.expr)}`{when}"

    parts = [fmt(a, "") for a in span.attributes]
    parts += [fmt(a, " (at end)") for a in span.end_attributes]
    if span.goodput:
        parts.append("`is_goodput_span` = `True`")
    return "<br>".join(parts) if parts else "–"


def render_docs(project: Project, templates_dir: Path) -> dict[str, str]:
    """Return ``{file name: text}`` for every docs page."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    spans = [
        SpanRow(s.name, s.group, s.file, s.function, _md(s.region.describe()), _attributes(s))
        for s in project.spans
    ]
    groups = [
        {
            "name": g.name,
            "description": _md(g.description),
            "spans": ", ".join(f"`{n}`" for n in dict.fromkeys(s.name for s in project.spans if s.group == g.name))
            or "–",
        }
        for g in project.groups
    ]
    presets = [
        {
            "name": p.name,
            "groups": ", ".join(project.expand_preset(p.name)),
            "description": _md(p.description),
        }
        for p in project.presets
    ]
    context = {"spans": spans, "groups": groups, "presets": presets}
    docs_dir = templates_dir / "docs"
    out: dict[str, str] = {}
    for template in sorted(p.name for p in docs_dir.iterdir() if p.name.endswith(DOC_SUFFIX)):
        out[template[: -len(".j2")]] = env.get_template(f"docs/{template}").render(context)
    return out
