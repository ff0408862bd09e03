"""The one-way data flow: specs -> validated model -> plan -> new sources -> outputs."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ParamSpec, TypeVar

from codegen.diagnostics import Diagnostics, SpecError
from codegen.emit.outputs import render_outputs
from codegen.emit.runtime import DEPENDENCY, PYPROJECT, VENDORED, declare_runtime, render_runtime
from codegen.resolve.plan import resolve
from codegen.resolve.sites import Plan
from codegen.spec.load import load_project
from codegen.spec.model import Hook, Project, Span
from codegen.strip import strip_sources
from codegen.target import (
    Failure,
    ReleaseError,
    SourceMismatch,
    Tree,
    label,
    locate_tree,
    render_failures,
    without_absent_packages,
)
from codegen.transforms.module import transform_file
from codegen.transforms.placed import check_placed
from codegen.upstream import UpstreamError

__all__ = ["Generation", "SourceMismatch", "Tree", "generate", "label", "plan_only", "render_failures"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _without_cyclic_gc(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``function`` with the cyclic garbage collector paused.

    libcst trees are hundreds of thousands of small objects, and each full collection walks all of
    them: a quarter of generate()'s time went to collections that found next to nothing (the trees
    hold no cycles; reference counting frees them). The collector's previous state is restored.
    """

    @functools.wraps(function)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return paused


@dataclass(frozen=True)
class Generation:
    """What a run generated: data only (``emit/outputs.py`` made the outputs)."""

    project: Project  # the entries that apply to this release and were placed
    source_root: Path
    plan: Plan
    # path relative to the source root -> (pristine text or None for an added file, new text)
    changes: dict[str, tuple[str | None, str]]
    docs: dict[str, str]
    tree: Tree
    excluded: tuple[Span | Hook, ...] = ()  # their ``releases:`` leave them out of this release
    missing: tuple[Failure, ...] = ()  # could not be placed, left out by --allow-missing
    # in packages the tree lacks (megatron/training of a core-only wheel), left out by --allow-missing
    absent: tuple[Failure, ...] = ()
    absent_note: str | None = None  # the one message saying so
    report: str = ""  # what was placed, excluded and left out (written beside a fork)
    warnings: tuple[str, ...] = ()  # rendered: ``path:line:col: warning: message``
    replaced: tuple[str, ...] = ()  # files whose hand-written instrumentation was stripped
    generated: dict[str, str] = field(default_factory=dict)  # everything under ``generated/``

    def generated_tree(self) -> dict[str, str]:
        """Everything under ``generated/``: the patch set, the docs, the spec files' JSON Schema,
        the semantic-convention registry."""
        return self.generated


@_without_cyclic_gc
def plan_only(spec_dir: Path, source: Path | None = None, release: str | None = None) -> tuple[Project, Plan]:
    """The validated project (as it applies to the tree's release) and its plan, without
    transforming anything."""
    diags = Diagnostics()
    project = load_project(spec_dir, diags)
    tree = _locate(project, source, release, diags)
    applied, _ = project.for_release(tree.release)
    applied, _, _ = without_absent_packages(applied, tree, allow_missing=False)
    plan, applied, _ = _place(applied, tree, diags, allow_missing=False)
    return applied, plan


@_without_cyclic_gc
def generate(
    specs: Path,
    source: Path | None = None,
    release: str | None = None,
    allow_missing: bool = False,
    replace_upstream: bool = False,
    runtime: str = VENDORED,
    served: bool = False,
) -> Generation:
    """Raise :class:`SpecError` with every problem of the specs, found loading or resolving;
    :class:`SourceMismatch` when valid specs do not fit a ``--source`` tree (unless
    ``allow_missing``: then what does not fit is left out and reported). With
    ``replace_upstream``, Megatron-LM's hand-written instrumentation is stripped first
    (``strip/upstream.py``; what it does not recognise raises UnrecognisedInstrumentation).
    ``runtime``: the runtime package in the tree (``vendored``) or the import shim that uses the
    megatron-otel-runtime package (``dependency``; on a replaced tree, its ``pyproject.toml``'s
    ``otel`` extra names that package instead of nemo-lens). ``served``: the text the import-time
    package serves in place of a replaced tree's modules, whose entry scripts it does not serve
    (the strip keeps #6438's public parameters, see ``strip/upstream.py``)."""
    diags = Diagnostics()
    full = load_project(specs, diags)
    tree = _locate(full, source, release, diags, replace_upstream)
    replaced: dict[str, tuple[str, str]] = {}
    if replace_upstream:
        from codegen.strip.upstream import strip_tree

        replaced = strip_tree(tree.root, full.runtime.package.strip("/"), keep_signatures=served)
    applied, excluded = full.for_release(tree.release)
    applied, absent, absent_note = without_absent_packages(applied, tree, allow_missing)
    overlay = {path: new for path, (_, new) in replaced.items()}
    plan, project, missing = _place(applied, tree, diags, allow_missing, overlay)
    root = tree.root
    changes: dict[str, tuple[str | None, str]] = {
        path: (old, new) for path, (old, new) in replaced.items() if path not in plan.files
    }
    for path, file_plan in sorted(plan.files.items()):
        new = transform_file(project, file_plan)
        # the post-condition: what the docs and the coverage page list as placed is in the code
        check_placed(project, file_plan, new)
        if new != file_plan.source:
            changes[path] = (file_plan.source, new)
    if replace_upstream and runtime == DEPENDENCY:
        declared = declare_runtime(root / PYPROJECT)
        if declared is not None:
            changes[PYPROJECT] = declared
    for path, text in render_runtime(project, runtime).items():
        existing = root / path
        old = existing.read_text(encoding="utf-8") if existing.is_file() else None
        if old != text:
            changes[path] = (old, text)
    changes = dict(sorted(changes.items()))
    outputs = render_outputs(project, full, plan, tree, changes, excluded, absent + missing)
    return Generation(
        project,
        root,
        plan,
        changes,
        outputs.docs,
        tree,
        excluded,
        missing,
        absent,
        absent_note,
        outputs.report,
        tuple(diags.render_warnings()),
        tuple(sorted(replaced)),
        outputs.generated,
    )


def _locate(
    project: Project, source: Path | None, release: str | None, diags: Diagnostics, replace: bool = False
) -> Tree:
    """The tree to instrument; when it cannot be had and the specs already have errors (an invalid
    pin, say), those errors are the cause to report, not the failure they lead to."""
    try:
        return locate_tree(project, source, release, replace)
    except (UpstreamError, ReleaseError):
        if diags:
            raise SpecError(diags) from None
        raise


def _place(
    project: Project,
    tree: Tree,
    diags: Diagnostics,
    allow_missing: bool,
    replaced: dict[str, str] | None = None,
) -> tuple[Plan, Project, tuple[Failure, ...]]:
    """Strip the files the entries name (``codegen.strip``: ``replaced``, upstream's
    instrumentation already out of these, and this generator's own constructs), then resolve every
    entry once against them. Problems in the specs themselves raise :class:`SpecError`.
    When only placing fails, on a ``--source`` tree (or with ``allow_missing``), the entries that
    cannot be placed raise :class:`SourceMismatch`, or with ``allow_missing`` are left out (the
    plan already holds only the placed ones) and returned."""
    spec_errors = bool(diags)
    resolution = resolve(project, tree.root, diags, strip_sources(project, tree.root, replaced))
    failures = resolution.failures()
    if spec_errors or (failures and not (tree.from_source or allow_missing)):
        for _, found in failures:
            diags.items.extend(found)
        raise SpecError(diags)
    if not failures:
        return resolution.plan, project, ()
    if not allow_missing:
        raise SourceMismatch(tree, failures)
    out = {id(entry) for entry, _ in failures}
    placed = replace(
        project,
        spans=tuple(s for s in project.spans if id(s) not in out),
        hooks=tuple(h for h in project.hooks if id(h) not in out),
    )
    return resolution.plan, placed, failures
