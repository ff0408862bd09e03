"""``codegen package``: the installable instrumentation (a wheel) for every supported release, or
the runtime package."""

from __future__ import annotations

import sys
from pathlib import Path

from codegen.cache import RunOptions
from codegen.cli.exits import EXIT_OK, EXIT_SOURCE, EXIT_USAGE
from codegen.cli.generation import cached_run
from codegen.cli.options import PackageOptions
from codegen.diagnostics import Diagnostics
from codegen.upstream import REPLACE_FLAG


def run(options: PackageOptions) -> int:
    from importlib import metadata

    from codegen.emit.package import ReleaseRun, write_wheel
    from codegen.spec.load import load_project
    from codegen.upstream import hand_written_sites

    if (options.source is None) != (not options.replace_upstream):
        given, missing = (
            ("--source", REPLACE_FLAG) if options.source is not None else (REPLACE_FLAG, "--source DIR")
        )
        print(f"error: codegen package {given} needs {missing}", file=sys.stderr)
        return EXIT_USAGE
    diags = Diagnostics()
    project = load_project(options.specs, diags)
    if options.runtime:
        from codegen.emit.package import write_runtime_wheel
        from codegen.emit.runtime import render_taxonomy, runtime_constant, runtime_sources

        modules = {**runtime_sources(), "_taxonomy.py": render_taxonomy(project)}
        wheel = write_runtime_wheel(options.out, modules, runtime_constant("VERSION"))
        print(f"wrote {wheel}")
        return EXIT_OK
    runs = []
    for pin in project.releases():
        built = cached_run(RunOptions(options.specs, release=pin.version))
        runs.append(ReleaseRun(built.release, Path(built.source_root), built.changes))
    if options.source is not None:
        built = cached_run(RunOptions(options.specs, options.source, replace_upstream=True, served=True))
        if built.release in {r.release for r in runs}:
            print(
                f"error: --source {options.source}: the tree says it is megatron-core {built.release}, a "
                "release the specs support already; --source names a tree carrying PR #6438 that no "
                "published release is",
                file=sys.stderr,
            )
            return EXIT_SOURCE
        if not hand_written_sites(Path(built.source_root)):
            print(
                f"error: --source {options.source}: the tree carries no hand-written instrumentation of "
                "PR #6438 (nothing to replace); codegen package --source takes a tree that carries it",
                file=sys.stderr,
            )
            return EXIT_SOURCE
        runs.append(ReleaseRun(built.release, Path(built.source_root), built.changes, replaced=True))
    try:
        version = metadata.version("megatron-otel-codegen")
    except metadata.PackageNotFoundError:
        version = "0.0.0"
    from codegen.diagnostics import program_path
    from codegen.otel_runtime._version import SCHEMA_URL

    built_from = {"codegen": program_path(), "specs": str(options.specs.resolve())}
    wheel = write_wheel(options.out, runs, version, SCHEMA_URL, built_from)
    releases = ", ".join(run.release for run in runs if not run.replaced)
    also = "".join(
        f"; {run.source_root} ({run.release}) with PR #6438 replaced" for run in runs if run.replaced
    )
    print(f"wrote {wheel} (megatron-core {releases}{also})")
    return EXIT_OK
