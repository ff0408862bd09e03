"""The coverage page (which spans each supported release carries) and the per-run report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codegen.emit.markdown import cell, code_cell
from codegen.emit.templating import environment
from codegen.spec.model import Hook, Project, Span

if TYPE_CHECKING:
    from codegen.target import Failure, Tree


# Source trees no registry publishes, as (column, the megatron-core version the tree says it is):
# Megatron-LM main at the commit of the snapshots the tests read (tests/support/upstream_main.py), which
# carries #6415's base layer and #6438's hand-written instrumentation (--replace-upstream).
SOURCE_TREES = (("Megatron-LM main d98e8a64dd (source tree)", "0.20.0"),)


@dataclass(frozen=True)
class _Column:
    version: str


def _source_trees(project: Project) -> list[tuple[str, str]]:
    """The ``SOURCE_TREES`` of the release line after the newest the specs support (megatron-core
    0.20 after 0.19): the tree the specs are meant to serve next."""
    from codegen.spec.model import version_key

    newest = version_key(project.releases()[-1].version) or ()
    if project.upstream.distribution != "megatron-core" or len(newest) < 2:
        return []
    return [
        (label, version)
        for label, version in SOURCE_TREES
        if (key := version_key(version)) and key[0] == newest[0] and key[1] == newest[1] + 1
    ]


def coverage_context(project: Project) -> dict[str, Any]:
    """One row per span (per name), one column per supported release and per source tree of
    ``SOURCE_TREES``: placed, or why not.

    It is read from the specs' ``releases:`` alone; the tests resolve the specs against every
    supported release (and the main snapshot), so "placed" means the instrumentation is placed there."""
    releases: list[Any] = list(project.releases())
    columns = [f"{p.version} (pinned)" if p is project.upstream else p.version for p in releases]
    trees = _source_trees(project)
    columns += [label for label, _ in trees]
    releases += [_Column(version) for _, version in trees]
    rows = []
    placed = {id(p): 0 for p in releases}
    absent = {id(p): 0 for p in releases}
    for span in project.spans:
        cells = []
        for pin in releases:
            if span.releases is None or span.releases.contains(pin.version):
                cells.append("placed")
            else:
                cells.append(f"not in this release: {cell(span.releases.why_not())}")
        where = f"{code_cell(span.file)}<br>{code_cell(span.function)}"
        for name in span.names or (span.name,):
            rows.append({"name": code_cell(name), "where": where, "cells": cells})
            for pin, state in zip(releases, cells):
                (placed if state == "placed" else absent)[id(pin)] += 1
    for lifecycle in project.lifecycle:
        rows.append(
            {"name": code_cell(lifecycle.name), "where": "runtime", "cells": ["runtime"] * len(releases)}
        )
    hooks = [
        {
            "where": f"{code_cell(h.file)}<br>{code_cell(h.function)}",
            "releases": code_cell(h.releases.text),
            "reason": cell(h.releases.why_not()),
        }
        for h in project.hooks
        if h.releases is not None
    ]
    counts = [
        {"label": "placed in the code", "cells": [placed[id(p)] for p in releases]},
        {"label": "opened by the runtime", "cells": [len(project.lifecycle)] * len(releases)},
        {"label": "not in this release", "cells": [absent[id(p)] for p in releases]},
    ]
    return {"columns": columns, "rows": rows, "counts": counts, "hooks": hooks}


def render_report(
    templates_dir: Path,
    tree: Tree,
    project: Project,
    excluded: tuple[Span | Hook, ...],
    missing: tuple[Failure, ...],
) -> str:
    """What one run placed, what the specs exclude from this release, and what --allow-missing
    left out: printed, written into the fork and, for a tree other than the pinned release,
    into the generated docs."""
    from codegen.target import label

    def entry(e: Span | Hook) -> str:
        return cell(label(e))

    context = {
        "tree": tree,
        "placed_spans": len(project.spans),
        "placed_hooks": len(project.hooks),
        "excluded": [
            {
                "entry": entry(e),
                "at": cell(str(e.pos)),
                "releases": code_cell(e.releases.text),
                "reason": cell(e.releases.why_not()),
            }
            for e in excluded
            if e.releases is not None  # an excluded entry always names its releases
        ],
        "missing": [
            {
                "entry": entry(e),
                "at": cell(str(items[0].pos)),
                "why": "<br>".join(
                    cell(i.message) + "".join(f"<br>&nbsp;&nbsp;{code_cell(n)}" for n in i.notes)
                    for i in items
                ),
            }
            for e, items in missing
        ],
    }
    return environment(templates_dir).get_template("report/report.md.j2").render(context)
