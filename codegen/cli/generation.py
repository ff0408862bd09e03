"""A generation as the commands see it: the pipeline's result through the result cache, and the
specs' warnings printed before it."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from codegen.cache import CachedRun, RunOptions, input_state, run_key
from codegen.cache import load as load_cached
from codegen.cache import store as store_cached
from codegen.diagnostics import Diagnostics, SpecError
from codegen.instrumentation._package_info import PACKAGE_INFO


def cached_run(options: RunOptions, use_cache: bool = True) -> CachedRun:
    """The outputs of a run: from the result cache when every input is unchanged."""
    key = run_key(options) if use_cache else None
    cached = load_cached(key) if key else None
    if cached is None:
        cached = _generate(options)
        if key:
            store_cached(key, cached)
    for line in cached.notes:
        print(line)
    if cached.warnings:
        print("\n".join(cached.warnings), file=sys.stderr)
    return cached


def _generate(options: RunOptions) -> CachedRun:
    from codegen.pipeline import generate
    from codegen.target import label, render_failures

    generation = generate(**asdict(options))
    tree = generation.tree
    notes = [
        f"{e.pos}: note: {label(e)} is not in megatron-core {tree.release}: {e.releases.why_not()}"
        for e in generation.excluded
        if e.releases is not None  # an excluded entry always names its releases
    ]
    warnings = list(generation.warnings)  # what the checks could not know (expressions)
    if generation.absent_note:
        warnings.append(f"warning: {generation.absent_note}")
    if generation.missing:
        warnings.append(render_failures(generation.missing, "warning"))
    if generation.missing or generation.absent:
        count = len(generation.missing) + len(generation.absent)
        warnings.append(
            f"left out {count} entr{'ies' if count != 1 else 'y'} that cannot be placed in {tree.root} "
            f"({tree.describe()}) (--allow-missing)"
        )
    source_root = generation.source_root
    files = sorted({*generation.plan.files, *generation.plan.also_read, *generation.replaced})
    files += [PACKAGE_INFO] if (source_root / PACKAGE_INFO).is_file() else []
    return CachedRun(
        str(source_root),
        generation.generated_tree(),
        {path: new for path, (_, new) in generation.changes.items()},
        len(generation.project.spans),
        len(generation.plan.files),
        input_state(source_root, files),
        tree.release,
        tree.pinned,
        notes,
        warnings,
        len(generation.missing) + len(generation.absent),
        generation.report,
    )


def spec_warnings_pass(specs: Path, strict: bool) -> bool:
    """Print the specs' warnings (as errors with ``strict``); False when ``strict`` found any."""
    from codegen.spec.load import load_project
    from codegen.spec.semconv import spec_warnings

    try:  # errors are the run's to report, all at once: here only the valid entries count
        found = spec_warnings(load_project(specs, Diagnostics()))
    except SpecError:
        return True
    kind = "error" if strict else "warning"
    for pos, message in found:
        print(f"{pos}: {kind}: {message}", file=sys.stderr)
    if found and strict:
        print(f"{len(found)} error{'s' if len(found) != 1 else ''} (--strict)", file=sys.stderr)
        return False
    return True
