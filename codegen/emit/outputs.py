"""The one emitter of a generation's outputs: the taxonomy pages, the run's report and everything
under ``generated/`` (the patch set, the pages, the spec files' JSON Schema, the
semantic-convention registry), made together from the plan and the new sources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from codegen.emit.coverage import render_report
from codegen.emit.docs import render_docs
from codegen.emit.goodput_docs import render_goodput_docs
from codegen.emit.patch import make_patch, write_patch_set
from codegen.emit.registry import render_registry
from codegen.emit.templating import TEMPLATES_DIR
from codegen.resolve.sites import Plan
from codegen.spec.model import Hook, Project, Span
from codegen.spec.schema import SCHEMA_PATH, render_schema
from codegen.target import Failure, Tree


@dataclass(frozen=True)
class Outputs:
    docs: dict[str, str]  # the taxonomy pages (generated/docs/; --in-place --docs)
    report: str  # what was placed, excluded and left out (written beside a fork)
    generated: dict[str, str]  # everything under generated/


def render_outputs(
    project: Project,
    full: Project,
    plan: Plan,
    tree: Tree,
    changes: Mapping[str, tuple[str | None, str]],
    excluded: tuple[Span | Hook, ...],
    left_out: tuple[Failure, ...],
) -> Outputs:
    """``project``: the entries placed in ``tree``; ``full``: every entry of the specs (the pages
    list the others' releases); ``changes``: path -> (old text or None, new text)."""
    docs = render_docs(project, plan, TEMPLATES_DIR, full)
    docs.update(render_goodput_docs(project, TEMPLATES_DIR))
    report = render_report(TEMPLATES_DIR, tree, project, excluded, left_out)
    patches = write_patch_set({path: make_patch(path, old, new) for path, (old, new) in changes.items()})
    generated = {f"patches/{name}": text for name, text in patches.items()}
    generated.update({f"docs/{name}": text for name, text in docs.items()})
    generated[SCHEMA_PATH] = render_schema()
    generated.update({f"registry/{name}": text for name, text in render_registry(project).items()})
    if not tree.pinned:
        generated["docs/report.md"] = report
    return Outputs(docs, report, generated)
