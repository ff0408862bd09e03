"""The argument parser (``build_parser``: the docs' CLI page is rendered from it) and ``parse``,
which turns a command line into the command's options (``options``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from codegen.cli.options import (
    ApplyOptions,
    Options,
    PackageOptions,
    ReportOptions,
    ValidateOptions,
    VerifyOptions,
)
from codegen.emit.runtime import RUNTIME_MODES, VENDORED
from codegen.upstream import REPLACE_FLAG

DESCRIPTION = """\
Generate OpenTelemetry instrumentation for Megatron-LM from declarative YAML specs.

Exit codes: 0 ok, 1 generated/ is stale (--check) or verify found problems, 2 spec or usage
error, 3 source, upstream or capture error (including specs that do not fit a --source tree),
4 internal error (a bug).
"""


def build_parser() -> argparse.ArgumentParser:
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


# -- codegen report (codegen/report/) ---------------------------------------------------------------

DEFAULT_SPECS = Path(__file__).resolve().parents[2] / "specs"


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


COMMANDS: dict[str, type[Options]] = {
    "apply": ApplyOptions,
    "validate": ValidateOptions,
    "verify": VerifyOptions,
    "package": PackageOptions,
    "report": ReportOptions,
}


def parse(argv: Sequence[str] | None = None) -> Options:
    """The options of the command ``argv`` names (argparse exits 2 on a usage error)."""
    words = list(sys.argv[1:] if argv is None else argv)
    parsed = vars(build_parser().parse_args(words))
    kind = COMMANDS[parsed.pop("command")]
    given = {f.name: parsed.pop(f.name) for f in fields(kind) if f.name in parsed}
    assert not parsed, f"options without a field in {kind.__name__}: {sorted(parsed)}"
    for name in ("capture", "captures"):  # nargs lists: frozen as tuples
        if name in given:
            given[name] = tuple(given[name])
    return kind(argv=tuple(words), **given)
