"""The tree being instrumented and its release; what a mismatch between specs and tree reports.

Kept free of libcst and Jinja2: the command line imports it before it knows it has work to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codegen.diagnostics import Diagnostic
from codegen.spec.model import Hook, Project, Span, version_key
from codegen.upstream import PACKAGE_INFO, UpstreamError, tree_release
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


class SourceMismatch(Exception):
    """Specs that are valid but do not fit a ``--source`` tree: every entry that cannot be placed."""

    def __init__(self, tree: Tree, failures: tuple[Failure, ...]) -> None:
        super().__init__(render_failures(failures, "error"))
        self.tree = tree
        self.failures = failures


def locate_tree(project: Project, source: Path | None = None, release: str | None = None) -> Tree:
    """The tree to instrument and its release: ``source`` (its version read from its own
    ``package_info.py``, or ``release``), else the wheel of ``release`` (one the specs support),
    else the pinned release."""
    if release is not None and (version_key(release) is None or release.count(".") != 2):
        raise ReleaseError(f"--release {release}: not a version X.Y.Z")
    if source is not None:
        root = upstream_source_root(project.upstream, source)
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
    found = tree_release(root)
    if found != pin.version:
        raise UpstreamError(
            f"{root}: the {pin.filename} tree says it is megatron-core {found or '(unreadable)'} "
            f"in {PACKAGE_INFO}, not {pin.version}"
        )
    pinned = pin is project.upstream
    return Tree(root, pin.version, pinned, False, "the pinned release" if pinned else "a supported release")


def label(entry: Span | Hook) -> str:
    what = f"span '{entry.name}'" if isinstance(entry, Span) else "hook"
    return f"{what} ({entry.file}: {entry.function})"


def render_failures(failures: tuple[Failure, ...], severity: str) -> str:
    """``path:line:col: SEVERITY: span 'NAME' (FILE: FUNCTION): why``, candidates below."""
    lines = []
    for entry, items in failures:
        for item in items:
            lines.append(f"{item.pos}: {severity}: {label(entry)}: {item.message}")
            lines.extend(f"    {note}" for note in item.notes)
    return "\n".join(lines)
