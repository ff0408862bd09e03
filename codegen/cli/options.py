"""What each command was asked to do: one frozen dataclass per command, built by
``parser.parse`` from the command line; the commands read nothing else."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from codegen.cache import RunOptions
from codegen.emit.runtime import VENDORED


@dataclass(frozen=True, kw_only=True)
class Options:
    argv: tuple[str, ...] = ()  # the command as it ran (for the hints that say what to run next)
    specs: Path


@dataclass(frozen=True, kw_only=True)
class _Resolving(Options):
    """A command that resolves the specs against a tree."""

    strict: bool = False
    source: Path | None = None
    release: str | None = None


@dataclass(frozen=True, kw_only=True)
class ValidateOptions(_Resolving):
    allow_missing: bool = False
    replace_upstream: bool = False

    @property
    def run(self) -> RunOptions:
        return RunOptions(self.specs, self.source, self.release, self.allow_missing, self.replace_upstream)


@dataclass(frozen=True, kw_only=True)
class ApplyOptions(ValidateOptions):
    out: Path | None = None
    generated: Path | None = None
    no_cache: bool = False
    runtime: str = VENDORED
    check: bool = False
    in_place: bool = False
    docs: Path | None = None
    allow_dirty: bool = False
    discard_hand_edits: bool = False

    @property
    def run(self) -> RunOptions:
        return replace(super().run, runtime=self.runtime)

    @property
    def in_tree(self) -> bool:
        """An in-tree run was asked for (``--in-place`` or one of its own options)."""
        return self.in_place or self.docs is not None or self.allow_dirty or self.discard_hand_edits


@dataclass(frozen=True, kw_only=True)
class VerifyOptions(_Resolving):
    capture: tuple[Path, ...]
    groups: str | None = None


@dataclass(frozen=True, kw_only=True)
class PackageOptions(Options):
    out: Path = Path("dist")
    runtime: bool = False
    source: Path | None = None
    replace_upstream: bool = False


@dataclass(frozen=True, kw_only=True)
class ReportOptions(Options):
    captures: tuple[Path, ...] = ()
    store: str | None = None
    table: str = "otel_traces"
    service: str | None = None
    run_id: str | None = None
    since: int | None = None
    until: int | None = None
    engine: str = "python"
    save_store: Path | None = None
    out: Path | None = None
    title: str = "Where did the time go"
    jobs: int | None = None
    trace_ranks: tuple[int, ...] | None = None
    trace_iterations: tuple[int, int] | None = None
