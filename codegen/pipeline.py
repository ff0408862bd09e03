"""The one-way data flow: specs -> validated model -> plan -> new sources -> outputs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codegen.diagnostics import Diagnostics
from codegen.emit.docs import render_docs
from codegen.emit.patch import make_patch, write_patch_set
from codegen.emit.runtime import render_runtime
from codegen.resolve.plan import build_plan
from codegen.resolve.sites import Plan
from codegen.spec.load import load_project
from codegen.spec.model import Project
from codegen.transforms.module import transform_file
from codegen.upstream import source_root as upstream_source_root

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


@dataclass(frozen=True)
class Generation:
    project: Project
    source_root: Path
    plan: Plan
    # path relative to the source root -> (pristine text or None for an added file, new text)
    changes: dict[str, tuple[str | None, str]]
    docs: dict[str, str]

    def patches(self) -> dict[str, str]:
        return write_patch_set(
            {path: make_patch(path, old, new) for path, (old, new) in self.changes.items()}
        )

    def generated_tree(self) -> dict[str, str]:
        """Everything under ``generated/``: the patch set and the docs."""
        tree = {f"patches/{name}": text for name, text in self.patches().items()}
        tree.update({f"docs/{name}": text for name, text in self.docs.items()})
        return tree


def plan_only(spec_dir: Path, source: Path | None = None) -> tuple[Project, Plan]:
    """The validated project and its plan, without transforming anything."""
    diags = Diagnostics()
    project = load_project(spec_dir, diags)
    root = upstream_source_root(project.upstream, source)
    return project, build_plan(project, root, diags)


def generate(spec_dir: Path, source: Path | None = None) -> Generation:
    """Raise :class:`SpecError` with every problem of the specs, found loading or resolving."""
    diags = Diagnostics()
    project = load_project(spec_dir, diags)
    root = upstream_source_root(project.upstream, source)
    plan = build_plan(project, root, diags)
    changes: dict[str, tuple[str | None, str]] = {}
    for path, file_plan in sorted(plan.files.items()):
        new = transform_file(project, file_plan)
        if new != file_plan.source:
            changes[path] = (file_plan.source, new)
    for path, text in render_runtime(project, TEMPLATES_DIR).items():
        existing = root / path
        old = existing.read_text(encoding="utf-8") if existing.is_file() else None
        if old != text:
            changes[path] = (old, text)
    return Generation(
        project, root, plan, dict(sorted(changes.items())), render_docs(project, plan, TEMPLATES_DIR)
    )
