"""What a plan holds: each spec entry bound to the statements of the parsed source it edits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

import libcst as cst

from codegen.diagnostics import Diagnostic
from codegen.resolve.context import FileContext
from codegen.spec.model import AroundHook, EntryHook, Hook, Span, StatementHook, WrapHook

_Entry = TypeVar("_Entry", Span, Hook)


@dataclass(frozen=True)
class StreamSite:
    """The one call a stream span hands its span over to: ``call`` in ``statement`` of ``block``."""

    block: cst.IndentedBlock
    statement: cst.BaseStatement
    call: cst.Call


@dataclass(frozen=True)
class Wrap:
    """A span, or an around hook, bound to ``block.body[start:end]`` of the original tree."""

    entry: Span | AroundHook
    function: cst.FunctionDef
    block: cst.IndentedBlock
    start: int
    end: int
    # (id(block), index) of every statement enclosing ``block``, outermost first
    ancestry: tuple[tuple[int, int], ...] = ()
    stream: StreamSite | None = None  # a stream span's call (``stream:``)

    def contains(self, other: Wrap, earlier: bool) -> bool:
        """Whether ``other`` lies inside this wrap (``earlier``: this one is declared first, which
        decides between two wraps of the same statements)."""
        if other is self or other.function is not self.function:
            return False
        if other.block is self.block:
            if (self.start, self.end) == (other.start, other.end):
                return earlier
            return self.start <= other.start and other.end <= self.end
        return any(b == id(self.block) and self.start <= i < self.end for b, i in other.ancestry)


@dataclass(frozen=True)
class Insert:
    """A hook call inserted before ``block.body[index]`` (or at the end when index == len)."""

    hook: EntryHook | StatementHook
    function: cst.FunctionDef
    block: cst.IndentedBlock
    index: int


@dataclass(frozen=True)
class Rewrite:
    """A wrap hook bound to one call inside ``statement`` (a statement of ``block``)."""

    hook: WrapHook
    function: cst.FunctionDef
    block: cst.IndentedBlock
    statement: cst.BaseStatement
    call: cst.Call


@dataclass
class FilePlan:
    path: str
    source: str
    module: cst.Module
    context: FileContext
    wraps: list[Wrap] = field(default_factory=list)
    inserts: list[Insert] = field(default_factory=list)
    decorations: list[tuple[Span, cst.FunctionDef]] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    # decorator spans' stream calls (a try-form span's is its Wrap's)
    streams: list[tuple[Span, cst.FunctionDef, StreamSite]] = field(default_factory=list)
    # id(entry) -> the entry with each ``any`` selector replaced by the alternative this code takes
    chosen: dict[int, Span | Hook] = field(default_factory=dict)
    # ids of the functions that may run at the final clearing of modules (resolve/at_exit.py)
    at_exit: frozenset[int] = frozenset()


@dataclass
class Plan:
    files: dict[str, FilePlan]
    # other source files the checks read (base classes of instrumented methods), for the cache
    also_read: tuple[str, ...] = ()

    def as_resolved(self, entry: _Entry) -> _Entry:
        """``entry`` as it was bound: its ``any`` selectors replaced by the chosen alternatives."""
        for file_plan in self.files.values():
            chosen = file_plan.chosen.get(id(entry))
            if isinstance(chosen, type(entry)):
                return chosen
        return entry


@dataclass(frozen=True)
class EntryResult:
    """What became of one spec entry: ``placed``, or ``failed`` (with the reasons). An entry whose
    ``releases:`` leave it out of this release never reaches resolution (``Project.for_release``)."""

    entry: Span | Hook
    status: Literal["placed", "failed"]
    diagnostics: tuple[Diagnostic, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """The plan of the placed entries and the result of every entry."""

    plan: Plan
    results: tuple[EntryResult, ...]

    def failures(self) -> tuple[tuple[Span | Hook, tuple[Diagnostic, ...]], ...]:
        """Each failed entry with its problems, in spec order."""
        failed = [r for r in self.results if r.status == "failed"]
        return tuple((r.entry, r.diagnostics) for r in sorted(failed, key=lambda r: r.entry.pos))
