"""The tree being instrumented and its release; what a mismatch between specs and tree reports.

Kept free of libcst and Jinja2: the command line imports it before it knows it has work to do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from codegen.diagnostics import Diagnostic
from codegen.instrumentation._package_info import PACKAGE_INFO, tree_release  # the one reader
from codegen.spec.model import Hook, Project, Span, version_key
from codegen.upstream import PACKAGE_DIR, REPLACE_FLAG, UpstreamError, hand_written_sites
from codegen.upstream import source_root as upstream_source_root


class ReleaseError(Exception):
    """A ``--release`` the specs cannot serve; one line for users (exit 2)."""


@dataclass(frozen=True)
class Tree:
    """The pristine tree being instrumented and the megatron-core release it is."""

    root: Path
    release: str
    pinned: bool  # the pinned release's wheel: the committed generated/ is its patch set
    from_source: bool  # a user's --source tree (a checkout or an unpacked wheel)
    how: str  # where the release comes from, for messages

    def describe(self) -> str:
        return f"megatron-core {self.release}, {self.how}"


# An entry that could not be placed, with every problem found placing it.
Failure = tuple[Span | Hook, tuple[Diagnostic, ...]]


class AlreadyInstrumented(UpstreamError):
    """A tree that already carries OpenTelemetry instrumentation (exit 3): instrumenting it again
    would emit every span twice."""


class PackagesMissing(UpstreamError):
    """A ``--source`` tree without a package the specs instrument (``megatron/training`` in a
    megatron-core wheel or sdist of 0.16 and older): one message for all its entries (exit 3)."""


class SourceMismatch(Exception):
    """Specs that are valid but do not fit a ``--source`` tree: every entry that cannot be placed."""

    def __init__(self, tree: Tree, failures: tuple[Failure, ...]) -> None:
        super().__init__(render_failures(failures, "error"))
        self.tree = tree
        self.failures = failures


def locate_tree(
    project: Project, source: Path | None = None, release: str | None = None, replace_upstream: bool = False
) -> Tree:
    """The tree to instrument and its release: ``source`` (its version read from its own
    ``package_info.py``, or ``release``), else the wheel of ``release`` (one the specs support),
    else the pinned release. A tree carrying Megatron-LM's hand-written instrumentation is refused
    unless ``replace_upstream`` (the pipeline then strips it, ``strip/upstream.py``)."""
    if release is not None and (version_key(release) is None or release.count(".") != 2):
        raise ReleaseError(f"--release {release}: not a version X.Y.Z")
    if source is not None:
        root = upstream_source_root(project.upstream, source)
        if not replace_upstream:
            _refuse_instrumented(project, root, f"--source {source}")
        found = tree_release(root)
        if release is not None:
            how = "given by --release" + (f" (the tree says {found})" if found and found != release else "")
            return Tree(root, release, False, True, how)
        if found is None:
            raise UpstreamError(
                f"--source {source}: cannot read the megatron-core version from {PACKAGE_INFO}; "
                "say which release the tree is with --release X.Y.Z"
            )
        return Tree(root, found, False, True, f"read from {PACKAGE_INFO}")
    pins = {p.version: p for p in project.releases()}
    version = release if release is not None else project.upstream.version
    pin = pins.get(version)
    if pin is None:
        raise ReleaseError(
            f"--release {version}: not a release the specs support ({', '.join(pins)}); "
            f"instrument a tree of your own with --source DIR [--release {version}]"
        )
    root = upstream_source_root(pin)
    if not replace_upstream:
        _refuse_instrumented(project, root, str(root))
    found = tree_release(root)
    if found != pin.version:
        raise UpstreamError(
            f"{root}: the {pin.filename} tree says it is megatron-core {found or '(unreadable)'} "
            f"in {PACKAGE_INFO}, not {pin.version}"
        )
    pinned = pin is project.upstream
    return Tree(root, pin.version, pinned, False, "the pinned release" if pinned else "a supported release")


def _refuse_instrumented(project: Project, root: Path, what: str) -> None:
    """Refuse, before resolving anything, a tree whose code already emits spans by hand
    (Megatron-LM's own, PR #6438); #6415's base layer alone is no reason."""
    found = hand_written_sites(root, project.runtime.package)
    if not found:
        return
    total = sum(n for site in found for _, n in site.counts)
    biggest = sorted(found, key=lambda site: -sum(n for _, n in site.counts))
    shown = "; ".join(site.describe() for site in biggest[:3])
    more = f"; and {len(found) - 3} more files" if len(found) > 3 else ""
    releases = ", ".join(p.version for p in project.releases())
    raise AlreadyInstrumented(
        f"{what} already carries hand-written OpenTelemetry instrumentation (Megatron-LM's own, "
        f"PR #6438): {total} site{'s' if total != 1 else ''} in {len(found)} file{'s' if len(found) != 1 else ''}: "
        f"{shown}{more}; instrumenting it as it is "
        f"would emit its spans twice. Replace it with the specs' instrumentation: add {REPLACE_FLAG} "
        f"(with --out DIR, or --in-place in a git checkout); or use the instrumentation the tree has "
        f"(Megatron-LM's own, turned on with --otel-enabled); or instrument a release without it "
        f"(the specs serve {releases}: `codegen apply SPECS --release X.Y.Z --out DIR`)"
    )


def absent_packages(project: Project, root: Path) -> dict[str, tuple[Span | Hook, ...]]:
    """The top-level packages (``megatron/training``) that entries of ``project`` instrument but
    the tree at ``root`` does not have, with those entries."""
    absent: dict[str, list[Span | Hook]] = {}
    for entry in project.entries():
        parts = entry.file.split("/")
        if len(parts) < 3 or parts[0] != PACKAGE_DIR:
            continue
        package = "/".join(parts[:2])
        if package in absent or not (root / package).is_dir():
            absent.setdefault(package, []).append(entry)
    return {package: tuple(entries) for package, entries in absent.items()}


def without_absent_packages(
    project: Project, tree: Tree, allow_missing: bool
) -> tuple[Project, tuple[Failure, ...], str | None]:
    """``project`` less the entries in packages the tree lacks, those entries as failures, and one
    message for them all; without ``allow_missing`` that message is raised (PackagesMissing)."""
    absent = absent_packages(project, tree.root)
    if not absent:
        return project, (), None
    gone = {id(entry) for entries in absent.values() for entry in entries}
    kept = [e for e in project.entries() if id(e) not in gone]
    parts = []
    for package, entries in absent.items():
        spans = sorted({e.name for e in entries if isinstance(e, Span)})
        hooks = sum(1 for e in entries if isinstance(e, Hook))
        what = f"{len(spans)} span{'s' if len(spans) != 1 else ''}" + (
            f" and {hooks} hook{'s' if hooks != 1 else ''}" if hooks else ""
        )
        shown = ", ".join(spans[:8]) + (f" and {len(spans) - 8} more" if len(spans) > 8 else "")
        parts.append(f"{package}/ is missing, which leaves out {what}{f' ({shown})' if shown else ''}")
    core_only = list(absent) == [f"{PACKAGE_DIR}/training"]
    why = (
        "the tree has megatron/core but no training package (megatron-core wheels and sdists of 0.16 "
        "and older ship megatron/core alone)"
        if core_only
        else "the tree lacks packages the specs instrument"
    )
    spans_kept = sum(1 for e in kept if isinstance(e, Span))
    there = sorted({"/".join(e.file.split("/")[:2]) for e in kept if isinstance(e, Span)})
    rest = f"the {spans_kept} {' and '.join(there)} span{'s' if spans_kept != 1 else ''}"
    message = f"{tree.root} ({tree.describe()}): {why}: {'; '.join(parts)}"
    if not allow_missing:
        raise PackagesMissing(
            f"{message}. Pass --allow-missing to instrument {rest} alone"
            + (", or give --source a Megatron-LM checkout for the training spans" if core_only else "")
        )
    message += f". Left out (--allow-missing): {rest} are instrumented"
    failures = tuple(
        (entry, (Diagnostic(entry.where_file, f"file '{entry.file}': {package}/ is not in the tree"),))
        for package, entries in absent.items()
        for entry in entries
    )
    left = replace(
        project,
        spans=tuple(s for s in project.spans if id(s) not in gone),
        hooks=tuple(h for h in project.hooks if id(h) not in gone),
    )
    return left, failures, message


# How refusals begin: the code is there, but it cannot be instrumented safely as asked.
REFUSAL = (
    "cannot instrument ",
    "cannot wrap ",
    "cannot insert ",
    "cannot rewrite ",
    "a flat span cannot ",
    "cannot parse ",
)


def _refused(message: str) -> bool:
    return message.startswith(REFUSAL) or " is not UTF-8 text" in message


def mismatch_advice(failures: tuple[Failure, ...], specs: object, tree: Tree) -> str:
    """The line under a mismatch's errors: what to do, for the kinds of failure there are. Marking
    entries with ``releases:``/``any:`` helps entries the tree does not match, not refused ones
    (their messages say why and what to do)."""
    refused = sum(1 for _, items in failures if all(_refused(d.message) for d in items))
    unmatched = len(failures) - refused
    count = len(failures)
    head = f"{count} entr{'ies' if count != 1 else 'y'} of {specs} cannot be placed in {tree.root} ({tree.describe()})"
    if not refused:
        return (
            f"{head}: mark them with 'releases:' or give 'any:' alternatives in the specs, or pass "
            "--allow-missing to instrument the rest"
        )
    if not unmatched:
        return f"{head}: each says why it is refused and what to do; or pass --allow-missing to instrument the rest"
    return (
        f"{head}: mark the {unmatched} the tree does not match with 'releases:' or give them 'any:' "
        f"alternatives; the {refused} refused say why and what to do; or pass --allow-missing to "
        "instrument the rest"
    )


def label(entry: Span | Hook) -> str:
    what = f"span '{entry.name}'" if isinstance(entry, Span) else "hook"
    return f"{what} ({entry.file}: {entry.function})"


def render_failures(failures: tuple[Failure, ...], severity: str) -> str:
    """``path:line:col: SEVERITY: span 'NAME' (FILE: FUNCTION): why``, candidates below."""
    lines = []
    for entry, items in failures:
        for item in items:
            message = item.message.removesuffix(f" ({entry.file})")  # the label names the file
            lines.append(f"{item.pos}: {severity}: {label(entry)}: {message}")
            lines.extend(f"    {note}" for note in item.notes)
    return "\n".join(lines)
