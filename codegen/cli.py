"""The ``codegen`` command line."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from codegen.cache import CachedRun, input_state, run_key
from codegen.cache import load as load_cached
from codegen.cache import store as store_cached
from codegen.diagnostics import Diagnostics, PlacementError, SpecError, program_path, rerun
from codegen.emit.runtime import RUNTIME_MODES, VENDORED
from codegen.emit.tree import diff_trees, read_tree, write_tree
from codegen.target import AlreadyInstrumented, ReleaseError, SourceMismatch, mismatch_advice
from codegen.upstream import (
    PACKAGE_INFO,
    REPLACE_FLAG,
    UnrecognisedInstrumentation,
    UpstreamError,
    default_cache_dir,
)

EXIT_OK, EXIT_STALE, EXIT_SPEC, EXIT_SOURCE, EXIT_INTERNAL = 0, 1, 2, 3, 4

DESCRIPTION = """\
Generate OpenTelemetry instrumentation for Megatron-LM from declarative YAML specs.

Exit codes: 0 ok, 1 generated/ is stale (--check) or verify found problems, 2 spec or usage
error, 3 source, upstream or capture error (including specs that do not fit a --source tree),
4 internal error (a bug).
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codegen", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    apply = commands.add_parser(
        "apply",
        help="instrument the sources: write generated/ (patches, docs) or a whole fork",
        description="Resolve the specs against the pristine sources and write the patch set and docs "
        "to generated/ (next to the specs directory), or the instrumented fork with --out.",
    )
    _common(apply)
    apply.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the whole instrumented source tree to DIR (replaced atomically); for a supported "
        "release other than the pinned one given alone, default: build/megatron-core-X.Y.Z/ beside the "
        "specs directory",
    )
    apply.add_argument(
        "--generated",
        type=Path,
        metavar="DIR",
        help="where the patch set and docs go (default: generated/ beside the specs directory)",
    )
    apply.add_argument(
        "--no-cache",
        action="store_true",
        help="do not reuse or store the results of an identical earlier run",
    )
    _allow_missing(apply)
    _replace_upstream(apply)
    apply.add_argument(
        "--runtime",
        choices=RUNTIME_MODES,
        default=VENDORED,
        help="how the tree gets the telemetry runtime: 'vendored' copies it into the tree as "
        "megatron/core/otel/ (default: the tree needs nothing more); 'dependency' writes only the "
        "taxonomy and a small import shim there that uses the megatron-otel-runtime package when it "
        "is installed and no-ops otherwise (codegen package --runtime builds it; with "
        "--replace-upstream, pyproject.toml's otel extra names it instead of nemo-lens)",
    )
    apply.add_argument(
        "--check",
        action="store_true",
        help="write nothing; print the diff between generated/ and what would be generated, exit 1 if they differ",
    )
    _in_place(apply)

    verify = commands.add_parser(
        "verify",
        help="check a captured run against the taxonomy generated from the specs",
        description="Read spans captured from a run (OTLP JSON file, or the console exporter's output) "
        "and report names not in the taxonomy, documented spans never seen, spans whose group or parent "
        "differs from the docs, and missing attributes. Exit 0 when clean, 1 with findings (an empty "
        "capture is a finding).",
    )
    _common(verify)
    verify.add_argument(
        "capture", type=Path, nargs="+", metavar="CAPTURE", help="the captured spans (one file or several)"
    )
    verify.add_argument(
        "--groups",
        metavar="SPEC",
        help="groups/presets whose every span must appear (default: the groups seen in the capture)",
    )

    _report_parser(commands)
    package = commands.add_parser(
        "package",
        help="write the installable instrumentation (a wheel) for every supported release",
        description="Instrument every release the specs support and write the pure-Python wheel "
        "megatron-otel-instrumentation: an import hook weaves an installed Megatron whose files match "
        "one of them, switched on by opentelemetry-instrument or MegatronInstrumentor().instrument().",
    )
    package.add_argument("specs", type=Path, metavar="SPECS", help="a spec directory (or one spec file)")
    package.add_argument(
        "--out", type=Path, metavar="DIR", default=Path("dist"), help="where the wheel goes (default: dist/)"
    )
    package.add_argument(
        "--runtime",
        action="store_true",
        help="write the runtime package megatron-otel-runtime instead (the dependency of a tree "
        "instrumented with 'codegen apply --runtime dependency'): the runtime's modules and the "
        "specs' taxonomy",
    )
    package.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="with --replace-upstream: also cover the Megatron-LM checkout DIR, which carries "
        "Megatron-LM's hand-written OpenTelemetry instrumentation (PR #6438; main stands in for the "
        "next release): its instrumentation is replaced by the specs' now, when the wheel is built, "
        "and a tree whose files match DIR's is served that text, with this runtime in place of "
        "nemo-lens; a #6438 tree the wheel does not know is left alone, with a warning",
    )
    package.add_argument(
        REPLACE_FLAG,
        action="store_true",
        help="replace the hand-written instrumentation of --source DIR (as 'codegen apply "
        "--replace-upstream' does); required with --source",
    )

    validate = commands.add_parser(
        "validate",
        help="check the specs against the sources without writing anything",
        description="Load and validate the specs and resolve every span against the sources.",
    )
    _common(validate)
    _allow_missing(validate)
    _replace_upstream(validate)
    return parser


def _replace_upstream(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        REPLACE_FLAG,
        action="store_true",
        help="on a tree carrying Megatron-LM's hand-written OpenTelemetry instrumentation (PR #6438), "
        "take it out (structurally; a site it does not recognise is an error) and put the specs' in: "
        "with --out, the patch set (--generated) and --in-place",
    )


def _in_place(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("in-tree mode (the specs kept in the Megatron-LM checkout)")
    group.add_argument(
        "--in-place",
        action="store_true",
        help="instrument the --source checkout itself: strip this project's instrumentation, apply the "
        "specs, write back only the files that change and the runtime package (with --check: write "
        "nothing, print the diff, exit 1 if the checkout differs)",
    )
    group.add_argument(
        "--docs",
        type=Path,
        metavar="DIR",
        help="with --in-place: also write the taxonomy pages into DIR inside the checkout (checked by --check)",
    )
    group.add_argument(
        "--allow-dirty",
        action="store_true",
        help="with --in-place: overwrite files with uncommitted changes (outside git: files the last run "
        "did not write)",
    )
    group.add_argument(
        "--discard-hand-edits",
        action="store_true",
        help="with --in-place: regenerate generated lines that were edited by hand instead of refusing",
    )


def _allow_missing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="instrument what can be placed in the tree and list what cannot (with --source: for "
        "trees carrying local changes) instead of failing with exit 3",
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", type=Path, metavar="SPECS", help="a spec directory (or one spec file)")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="treat spec warnings (semconv naming rules, attributes without a type) as errors",
    )
    parser.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="a Megatron-LM checkout (or unpacked megatron-core wheel) to instrument instead of the "
        "pinned megatron-core release; its megatron/ package is the tree",
    )
    parser.add_argument(
        "--release",
        metavar="X.Y.Z",
        help="the megatron-core release to instrument: one the specs support (fetched like the pinned "
        "one), or with --source the release the tree is (overrides its package_info.py)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for hints: the command as it ran
    if not args.specs.exists():
        print(f"{args.specs}: error: no such spec directory or file", file=sys.stderr)
        return EXIT_SPEC
    try:
        if args.command == "report":
            return _report(args)
        if args.command not in ("verify", "package") and not _spec_warnings(args):
            return EXIT_SPEC
        if args.command == "validate":
            return _validate(args)
        if args.command == "verify":
            return _verify(args)
        if args.command == "package":
            return _package(args)
        return _apply(args)
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SPEC
    except SourceMismatch as exc:
        print(exc, file=sys.stderr)
        print(mismatch_advice(exc.failures, args.specs, exc.tree), file=sys.stderr)
        return EXIT_SOURCE
    except UnrecognisedInstrumentation as exc:
        print(exc, file=sys.stderr)
        count = len(exc.lines)
        print(
            f"{REPLACE_FLAG}: {count} hand-written site{'s' if count != 1 else ''} not recognised; "
            "nothing was written",
            file=sys.stderr,
        )
        return EXIT_SOURCE
    except SpecError as exc:
        for warning in exc.diagnostics.render_warnings():
            print(warning, file=sys.stderr)
        print(exc.diagnostics.render(), file=sys.stderr)
        count = len(set(exc.diagnostics.items))
        print(f"{count} error{'s' if count != 1 else ''}", file=sys.stderr)
        return EXIT_SPEC
    except UpstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if isinstance(exc, AlreadyInstrumented) and {"--out", "--in-place"} & set(args.argv):
            print(f"    to replace it: run '{rerun(args.argv, add=[REPLACE_FLAG])}'", file=sys.stderr)
        return EXIT_SOURCE
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SOURCE
    except PlacementError as exc:  # the generator's post-condition failed: a bug, located
        print(exc, file=sys.stderr)
        print("internal error in codegen (a bug: please report it with the lines above)", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception:  # noqa: BLE001  # a bug in the generator, not in the input: say so, with what to report
        import traceback

        traceback.print_exc()
        print("internal error in codegen (a bug: please report it with the traceback above)", file=sys.stderr)
        return EXIT_INTERNAL


def _run(args: argparse.Namespace, use_cache: bool) -> CachedRun:
    """The outputs of a run: from the result cache when every input is unchanged."""
    allow_missing = getattr(args, "allow_missing", False)
    replace = getattr(args, "replace_upstream", False)
    from codegen.spec.load import display_path

    runtime = getattr(args, "runtime", VENDORED)
    # the notes and warnings name spec files as seen from where this run is: part of the key
    options = (
        f"release {args.release}\nallow_missing {allow_missing}\nspecs as {display_path(args.specs)}"
        + (f"\n{REPLACE_FLAG}" if replace else "")
    )
    options += f"\nruntime {runtime}" if runtime != VENDORED else ""
    options += "\nserved" if getattr(args, "served", False) else ""
    key = run_key(args.specs, args.source, options) if use_cache else None
    cached = load_cached(key) if key else None
    if cached is None:
        cached = _generate(args, allow_missing)
        if key:
            store_cached(key, cached)
    for line in cached.notes:
        print(line)
    if cached.warnings:
        print("\n".join(cached.warnings), file=sys.stderr)
    return cached


def _generate(args: argparse.Namespace, allow_missing: bool) -> CachedRun:
    from codegen.pipeline import generate
    from codegen.target import label, render_failures

    generation = generate(
        args.specs,
        args.source,
        args.release,
        allow_missing,
        getattr(args, "replace_upstream", False),
        getattr(args, "runtime", VENDORED),
        served=getattr(args, "served", False),
    )
    tree = generation.tree
    assert tree is not None
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


def _spec_warnings(args: argparse.Namespace) -> bool:
    """Print the specs' warnings (as errors with --strict); False when --strict found any."""
    from codegen.emit.registry import spec_warnings
    from codegen.spec.load import load_project

    try:  # errors are the run's to report, all at once: here only the valid entries count
        found = spec_warnings(load_project(args.specs, Diagnostics()))
    except SpecError:
        return True
    kind = "error" if args.strict else "warning"
    for pos, message in found:
        print(f"{pos}: {kind}: {message}", file=sys.stderr)
    if found and args.strict:
        print(f"{len(found)} error{'s' if len(found) != 1 else ''} (--strict)", file=sys.stderr)
        return False
    return True


def _validate(args: argparse.Namespace) -> int:
    run = _run(args, use_cache=True)
    print(
        f"{args.specs}: {run.spans} spans in {run.files} files resolve against {run.source_root} "
        f"(megatron-core {run.release})"
    )
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    from codegen.capture import CapturedSpan, CaptureError, iter_records
    from codegen.pipeline import plan_only
    from codegen.verify import verify
    from codegen.verify_ranks import is_multi_rank, verify_ranks

    try:  # the capture first: a malformed one fails before the specs are resolved
        records = list(iter_records(args.capture))
    except CaptureError as exc:
        print(exc, file=sys.stderr)
        return EXIT_SOURCE
    project, plan = plan_only(args.specs, args.source, args.release)
    groups = None
    if args.groups is not None:
        names = {g.name for g in project.groups}
        selected: set[str] = set()
        for item in (part.strip().lower() for part in args.groups.split(",") if part.strip()):
            if item in names:
                selected.add(item)
            elif any(p.name == item for p in project.presets):
                selected.update(project.expand_preset(item))
            else:
                valid = ", ".join([p.name for p in project.presets] + sorted(names)) or "none declared"
                print(f"error: --groups: unknown group or preset '{item}' (valid: {valid})", file=sys.stderr)
                return EXIT_SPEC
        groups = frozenset(selected)
    captured = [r for r in records if isinstance(r, CapturedSpan)]
    metrics = [r for r in records if not isinstance(r, CapturedSpan)]
    if is_multi_rank(captured):  # several ranks: per rank, and across them (verify_ranks)
        report = verify_ranks(project, plan, captured, groups, metrics)
    else:
        report = verify(project, plan, captured, groups, metrics)
    print(report.render())
    return EXIT_OK if report.clean else EXIT_STALE


# -- codegen report (codegen/report/) ---------------------------------------------------------------

DEFAULT_SPECS = Path(__file__).resolve().parent.parent / "specs"


def _report_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = commands.add_parser(
        "report",
        help="goodput, badput and step times of a run from its captured spans; a timeline",
        description="Read what a run exported (OTLP JSON files, the console exporter's output; several "
        "files of several ranks and restarts of one job) and print where the time went: goodput, badput "
        "by category, step times, checkpoints. With --out, also write report.txt, a Perfetto trace "
        "(trace.perfetto.json) and a self-contained HTML page (report.html). Exit 0, or 3 when a capture "
        "cannot be read.",
    )
    report.add_argument("captures", type=Path, nargs="*", metavar="CAPTURE", help="captured spans")
    store = report.add_argument_group(
        "trace store",
        "Instead of files, the OpenTelemetry Collector ClickHouse exporter's otel_traces table: the "
        "figures are computed by queries in the store, only aggregates come back "
        "(docs/guide/report-store.md). --table, --service, --run-id, --since and --until select the "
        "run there, and among capture files with --engine chdb.",
    )
    store.add_argument(
        "--store",
        metavar="ADDRESS",
        help="http(s)://host:8123[/database] (a ClickHouse server; user:password@ in the URL if "
        "needed) or chdb:PATH (a chdb database folder; the report-store extra)",
    )
    store.add_argument("--table", default="otel_traces", help="the spans' table (default: %(default)s)")
    store.add_argument("--service", metavar="NAME", help="the run's service.name (ServiceName)")
    store.add_argument("--run-id", metavar="ID", help="the run's megatron.run_id (or SLURM run_uuid)")
    store.add_argument(
        "--since", type=_time_arg, metavar="TIME", help="spans starting at or after (ISO 8601, UTC)"
    )
    store.add_argument(
        "--until", type=_time_arg, metavar="TIME", help="spans starting at or before (ISO 8601, UTC)"
    )
    report.add_argument(
        "--engine",
        choices=("python", "chdb"),
        default="python",
        help="for capture files: python (default) reads them here; chdb loads them into the "
        "exporter's schema in an in-memory chdb and runs the store's queries (report-store extra)",
    )
    report.add_argument(
        "--save-store",
        type=Path,
        metavar="DIR",
        help="load the capture files into a new chdb database folder DIR (the exporter's otel_traces; "
        "implies --engine chdb) and report from it; --store chdb:DIR reports it again later",
    )
    report.add_argument(
        "--specs",
        type=Path,
        default=DEFAULT_SPECS,
        metavar="DIR",
        help="the spec directory (default: %(default)s)",
    )
    report.add_argument("--out", type=Path, metavar="DIR", help="write the report files into DIR")
    report.add_argument("--title", default="Where did the time go", help="the HTML page's title")
    report.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="read several capture files in N worker processes (default: one per CPU when the files "
        "add up to 32 MB or more, else 1)",
    )
    report.add_argument(
        "--trace-ranks",
        type=_ranks_arg,
        metavar="A-B,C",
        help="the ranks the Perfetto trace keeps (default: every rank)",
    )
    report.add_argument(
        "--trace-iterations",
        type=_range_arg,
        metavar="A-B",
        help="the iterations the Perfetto trace keeps (default: all when the capture has at most "
        "1,000,000 spans, else the first that fit in that many)",
    )


def _time_arg(text: str) -> int:
    from codegen.report.store import parse_time

    try:
        return parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time (ISO 8601 or ns since the epoch): {text!r}") from None


def _ranks_arg(text: str) -> tuple[int, ...]:
    from codegen.report.trace_window import parse_ranks

    try:
        return parse_ranks(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of ranks (A-B,C): {text!r}") from None


def _range_arg(text: str) -> tuple[int, int]:
    from codegen.report.trace_window import parse_range

    try:
        return parse_range(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an iteration range (A-B): {text!r}") from None


def _report(args: argparse.Namespace) -> int:
    from codegen.report import (
        CaptureError,
        Selection,
        TaxonomyError,
        build,
        build_from_store,
        build_with_chdb,
        write_outputs,
    )
    from codegen.spec.load import load_project

    if bool(args.captures) == (args.store is not None):
        print("error: codegen report takes capture files or --store ADDRESS (one of them)", file=sys.stderr)
        return 2  # a usage error, as argparse exits
    selection = Selection(args.table, args.service, args.run_id, args.since, args.until)
    chdb = args.engine == "chdb" or args.save_store is not None
    if args.store is not None and args.save_store is not None:
        print("error: --save-store loads capture files into a new chdb store, not --store", file=sys.stderr)
        return 2
    if args.captures and not chdb and selection.options():
        print(
            f"error: {', '.join(selection.options())}: capture files are read whole; to select among "
            "their spans add --engine chdb (the report-store extra), or name only the run's files",
            file=sys.stderr,
        )
        return 2  # never ignored: the report would not be the selection's
    diags = Diagnostics()
    try:
        project = load_project(args.specs, diags)
        if args.store is not None:
            outputs = build_from_store(project, args.store, selection)
        elif chdb:
            outputs = build_with_chdb(project, args.captures, selection, args.save_store)
        else:
            outputs = build(project, args.captures, args.jobs)
        try:
            written, window = (
                write_outputs(outputs, args.out, args.title, args.trace_ranks, args.trace_iterations)
                if args.out is not None
                else ([], "")
            )
        finally:
            outputs.close()
    except SpecError as exc:
        print(exc.diagnostics.render(), file=sys.stderr)
        return EXIT_SPEC
    except TaxonomyError as exc:
        print(f"{args.specs}: error: {exc}", file=sys.stderr)
        return EXIT_SPEC
    except CaptureError as exc:
        print(exc, file=sys.stderr)
        return EXIT_SOURCE
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SOURCE
    from codegen.report.parse import located

    for name, (count, where) in sorted(outputs.report.unknown.items()):
        message = f"span '{name}' ({count}x) is not in the specs' taxonomy"
        print(located(where, message, "warning"), file=sys.stderr)
    print(outputs.text, end="")
    for path in written:
        print(f"wrote {path}" + (f" ({window})" if path.name == "trace.perfetto.json" else ""))
    return EXIT_OK


def _package(args: argparse.Namespace) -> int:
    from importlib import metadata

    from codegen.emit.package import ReleaseRun, write_wheel
    from codegen.spec.load import load_project
    from codegen.upstream import hand_written_sites

    if (args.source is None) != (not args.replace_upstream):
        given, missing = (
            ("--source", REPLACE_FLAG) if args.source is not None else (REPLACE_FLAG, "--source DIR")
        )
        print(f"error: codegen package {given} needs {missing}", file=sys.stderr)
        return 2  # a usage error, as argparse exits
    diags = Diagnostics()
    project = load_project(args.specs, diags)
    if args.runtime:
        from codegen.emit.package import write_runtime_wheel
        from codegen.emit.runtime import render_taxonomy, runtime_constant, runtime_sources

        modules = {**runtime_sources(), "_taxonomy.py": render_taxonomy(project)}
        wheel = write_runtime_wheel(args.out, modules, runtime_constant("VERSION"))
        print(f"wrote {wheel}")
        return EXIT_OK
    runs = []
    for pin in project.releases():
        options = argparse.Namespace(specs=args.specs, source=None, release=pin.version, allow_missing=False)
        run = _run(options, use_cache=True)
        runs.append(ReleaseRun(run.release, Path(run.source_root), run.changes))
    if args.source is not None:
        options = argparse.Namespace(
            specs=args.specs,
            source=args.source,
            release=None,
            allow_missing=False,
            replace_upstream=True,
            served=True,
        )
        run = _run(options, use_cache=True)
        if run.release in {r.release for r in runs}:
            print(
                f"error: --source {args.source}: the tree says it is megatron-core {run.release}, a "
                "release the specs support already; --source names a tree carrying PR #6438 that no "
                "published release is",
                file=sys.stderr,
            )
            return EXIT_SOURCE
        if not hand_written_sites(Path(run.source_root)):
            print(
                f"error: --source {args.source}: the tree carries no hand-written instrumentation of "
                "PR #6438 (nothing to replace); codegen package --source takes a tree that carries it",
                file=sys.stderr,
            )
            return EXIT_SOURCE
        runs.append(ReleaseRun(run.release, Path(run.source_root), run.changes, replaced=True))
    try:
        version = metadata.version("megatron-otel-codegen")
    except metadata.PackageNotFoundError:
        version = "0.0.0"
    from codegen.otel_runtime._version import SCHEMA_URL

    built_from = {"codegen": program_path(), "specs": str(args.specs.resolve())}
    wheel = write_wheel(args.out, runs, version, SCHEMA_URL, built_from)
    releases = ", ".join(run.release for run in runs if not run.replaced)
    also = "".join(
        f"; {run.source_root} ({run.release}) with PR #6438 replaced" for run in runs if run.replaced
    )
    print(f"wrote {wheel} (megatron-core {releases}{also})")
    return EXIT_OK


FORK_MARKER = ".codegen-fork"
FORK_REPORT = "otel-codegen-report.md"  # what was placed, excluded and left out, beside the sources
# What `generated/` may hold: only files this command writes there.
PATCH_FILE = re.compile(r"patches/(series|\d{4}-[^/]+\.patch)")


MARKED_FILE = re.compile(r"docs/[^/]+\.(md|svg)|schema/[^/]+\.json|registry/[^/]+\.yaml")


def _generated_file(path: Path, rel: str) -> bool:
    """A patch this command names, or a docs page, schema or registry file that says it was
    generated (every one does, in its first lines)."""
    if PATCH_FILE.fullmatch(rel):
        return True
    if not MARKED_FILE.fullmatch(rel):
        return False
    with path.open("rb") as handle:
        return b"Generated by megatron-otel-codegen" in handle.read(512)


def _destination_problem(
    dest: Path, option: str, ours: Callable[[Path], bool], protected: list[Path]
) -> str | None:
    """Why replacing ``dest`` wholesale would destroy something that is not ours, if it would."""
    dest = dest.resolve()
    for path in protected:
        path = path.resolve()
        if path == dest or dest in path.parents:
            return f"{option} {dest}: it contains {path}, which would be replaced"
    if dest.is_file():
        return f"{option} {dest}: a file is in the way"
    if dest.is_dir():
        foreign = sorted(
            p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() and not ours(p)
        )
        if foreign:
            return (
                f"{option} {dest}: holds {', '.join(foreign[:5])}, which this command did not write; "
                "choose an empty or new directory"
            )
    return None


def _default_generated_refused(args: argparse.Namespace, generated_dir: Path, reason: str) -> int:
    what = (
        "compare with --generated DIR"
        if args.check
        else "write with --out DIR (the fork) and/or --generated DIR (patches and docs)"
    )
    print(
        f"error: {generated_dir} is the reviewed patch set of the pinned release; {reason}: {what}",
        file=sys.stderr,
    )
    return EXIT_SPEC


def _apply(args: argparse.Namespace) -> int:
    if args.in_place or args.docs is not None or args.allow_dirty or args.discard_hand_edits:
        from codegen.inplace import run as run_in_place

        return run_in_place(args)
    specs_dir = args.specs if args.specs.is_dir() else args.specs.parent
    generated_dir: Path = args.generated or specs_dir.resolve().parent / "generated"
    # The default generated/ belongs to the pinned release: a tree of one's own, another release
    # (known once the specs are read) or a partial result goes only where --out/--generated say.
    use_generated = True
    if args.generated is None and (args.source is not None or args.allow_missing):
        reason = f"--source {args.source} is a tree of your own" if args.source else "--allow-missing"
        if args.out is None or args.check:
            return _default_generated_refused(args, generated_dir, reason)
        use_generated = False
    cache_dir = default_cache_dir()  # the pristine trees every later run instruments
    protected = [specs_dir, Path.cwd(), cache_dir] + ([args.source] if args.source else [])
    problem = _destinations_problem(args, generated_dir, use_generated, cache_dir, protected)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_SPEC
    run = _run(args, use_cache=not args.no_cache)
    if args.generated is None and use_generated and not run.pinned:
        reason = f"megatron-core {run.release} is not the pinned release"
        if args.check:
            return _default_generated_refused(args, generated_dir, reason)
        if args.out is None:
            # Another supported release with no destination named: its fork goes to build/, never
            # over the reviewed patch set of the pinned release.
            out = specs_dir.resolve().parent / "build" / f"megatron-core-{run.release}"
            problem = _destination_problem(
                out, "--out", lambda p: (out / FORK_MARKER).is_file(), protected + [generated_dir]
            )
            if problem:
                print(f"error: {problem}", file=sys.stderr)
                return EXIT_SPEC
            print(f"note: {reason}: {generated_dir} is left alone (--out DIR to choose where the fork goes)")
            args.out = out
        use_generated = False
    if args.check:
        return _check_generated(args, generated_dir, run.tree)
    _write_outputs(args, run, generated_dir if use_generated else None)
    return EXIT_OK


def _destinations_problem(
    args: argparse.Namespace, generated_dir: Path, use_generated: bool, cache_dir: Path, protected: list[Path]
) -> str | None:
    """Why ``--generated`` or ``--out`` cannot be written, or None."""
    checks: list[tuple[Path, str, Callable[[Path], bool], list[Path]]] = []
    if not args.check and use_generated:
        if (
            generated_dir.resolve() == cache_dir.resolve()
            or cache_dir.resolve() in generated_dir.resolve().parents
        ):
            return f"--generated {generated_dir}: inside the cache {cache_dir}"
        checks.append(
            (
                generated_dir,
                "--generated",
                lambda p: _generated_file(p, p.relative_to(generated_dir.resolve()).as_posix()),
                protected,
            )
        )
    if args.out is not None:
        out = args.out.resolve()
        inside = [p.resolve() for p in (args.source, generated_dir) if p is not None]
        if any(out == p or p in out.parents for p in inside):
            return f"--out {out}: inside --source or --generated, it would copy itself"
        if out == cache_dir.resolve() or cache_dir.resolve() in out.parents:
            return (
                f"--out {out}: inside the cache {cache_dir}, which holds the pristine sources "
                "every later run instruments"
            )
        # an existing fork (it carries the marker) is ours as a whole; else it must be new or empty
        checks.append((out, "--out", lambda p: (out / FORK_MARKER).is_file(), protected + [generated_dir]))
    for dest, option, ours, guarded in checks:
        problem = _destination_problem(dest, option, ours, guarded)
        if problem:
            return problem
    return None


def _check_generated(args: argparse.Namespace, generated_dir: Path, tree: dict[str, str]) -> int:
    """``--check``: whether ``generated_dir`` holds exactly ``tree``."""
    diff = diff_trees(str(generated_dir), read_tree(generated_dir), tree)
    if diff:
        sys.stdout.write(diff)
        print(f"{generated_dir} is stale: run '{rerun(args.argv, drop=['--check'])}'", file=sys.stderr)
        return EXIT_STALE
    print(f"{generated_dir} is up to date ({len(tree)} files)")
    return EXIT_OK


def _write_outputs(args: argparse.Namespace, run: CachedRun, generated_dir: Path | None) -> None:
    """Write generated/ (unless None) and the fork with ``--out``."""
    if generated_dir is not None:
        write_tree(generated_dir, run.tree)
        docs = sum(1 for name in run.tree if name.startswith("docs/") and name.endswith(".md"))
        print(f"wrote {generated_dir}: {len(run.changes)} patched or added files, {docs} docs pages")
    if args.out is not None:
        fork = dict(run.changes)
        fork[FORK_MARKER] = "Written by `codegen apply --out`; the directory is replaced on the next run.\n"
        fork[FORK_REPORT] = run.report
        write_tree(args.out, fork, base=Path(run.source_root))
        print(
            f"wrote the instrumented fork of megatron-core {run.release} to {args.out} "
            f"({run.spans} spans placed; report: {args.out / FORK_REPORT})"
        )


if __name__ == "__main__":
    sys.exit(main())
