"""The validated spec model: what the YAML says, with the position of every entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from codegen.diagnostics import Pos
from codegen.upstream import UpstreamPin

# Statement selector kinds: a simple statement that calls / assigns, or a compound statement
# chosen by its header.
SIMPLE_KINDS = ("call", "assign")
COMPOUND_KINDS = ("if", "for", "while", "with", "try")
SELECTOR_KINDS = SIMPLE_KINDS + COMPOUND_KINDS


@dataclass(frozen=True)
class Selector:
    """One statement inside a function, chosen structurally (never by line number)."""

    kind: str  # one of SELECTOR_KINDS
    value: str  # dotted callee, assigned name, or the compound statement's header
    pos: Pos
    within: Selector | None = None  # narrowed to the block(s) of this compound statement
    occurrence: int | None = None  # 1-based among the remaining matches, in source order

    def describe(self) -> str:
        text = f"{{{self.kind}: {self.value}}}"
        if self.within is not None:
            text += f" within {self.within.describe()}"
        if self.occurrence is not None:
            text += f" (occurrence {self.occurrence})"
        return text


RegionKind = Literal["function", "statement", "range", "after", "body"]


@dataclass(frozen=True)
class Region:
    """The statements a span covers; always a contiguous run of one block."""

    kind: RegionKind
    pos: Pos
    first: Selector | None = None  # statement / range start / after / body owner
    last: Selector | None = None  # range end
    branch: Literal["body", "else"] = "body"

    def describe(self) -> str:
        if self.kind == "function":
            return "whole function"
        assert self.first is not None
        if self.kind == "statement":
            return self.first.describe()
        if self.kind == "range":
            assert self.last is not None
            return f"from {self.first.describe()} to {self.last.describe()}"
        if self.kind == "after":
            return f"after {self.first.describe()}"
        return f"{'else-' if self.branch == 'else' else ''}body of {self.first.describe()}"


@dataclass(frozen=True)
class Attribute:
    key: str
    expr: str  # a Python expression, evaluated in the instrumented function only when recording
    pos: Pos


@dataclass(frozen=True)
class Span:
    name: str
    group: str
    file: str  # POSIX path relative to the source root
    function: str  # "func" or "Class.method"
    region: Region
    pos: Pos
    attributes: tuple[Attribute, ...] = ()
    end_attributes: tuple[Attribute, ...] = ()  # set once the covered statements complete
    goodput: bool = False
    note: str = ""
    file_pos: Pos | None = None  # where the file is named (the span's own key or the file's top)
    function_pos: Pos | None = None

    @property
    def where_file(self) -> Pos:
        return self.file_pos or self.pos

    @property
    def where_function(self) -> Pos:
        return self.function_pos or self.pos


@dataclass(frozen=True)
class Group:
    name: str
    description: str
    pos: Pos

    @property
    def flag(self) -> str:
        """The runtime module attribute that is true while the group records."""
        return self.name.upper()


@dataclass(frozen=True)
class Preset:
    name: str
    members: tuple[str, ...]  # group or preset names as written; "*" means every group
    pos: Pos
    description: str = ""


@dataclass(frozen=True)
class Runtime:
    package: str  # POSIX path of the rendered runtime package, e.g. "megatron/core/otel"
    pos: Pos

    @property
    def module(self) -> str:
        return self.package.replace("/", ".")

    @property
    def parent_module(self) -> str:
        return self.module.rpartition(".")[0]

    @property
    def alias(self) -> str:
        """The name instrumented files import the runtime as."""
        return self.module.rpartition(".")[2]


@dataclass(frozen=True)
class Project:
    runtime: Runtime
    upstream: UpstreamPin
    groups: tuple[Group, ...]
    presets: tuple[Preset, ...]
    spans: tuple[Span, ...]
    spec_files: tuple[str, ...] = field(default=())

    def group(self, name: str) -> Group:
        return next(g for g in self.groups if g.name == name)

    def expand_preset(self, name: str) -> tuple[str, ...]:
        """Group names of a preset, in declaration order of the groups."""
        seen: set[str] = set()
        stack = [name]
        while stack:
            current = stack.pop()
            preset = next((p for p in self.presets if p.name == current), None)
            if preset is None:
                seen.add(current)
                continue
            for member in preset.members:
                if member == "*":
                    seen.update(g.name for g in self.groups)
                elif member not in seen:
                    stack.append(member)
        return tuple(g.name for g in self.groups if g.name in seen)

    def files(self) -> tuple[str, ...]:
        return tuple(sorted({s.file for s in self.spans}))
