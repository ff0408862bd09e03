"""The validated spec model: what the YAML says, with the position of every entry."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from codegen.diagnostics import Pos
from codegen.upstream import UpstreamPin

# Statement selector kinds: a simple statement that calls / assigns, or a compound statement
# chosen by its header.
SIMPLE_KINDS = ("call", "assign", "return")
COMPOUND_KINDS = ("if", "for", "while", "with", "try")
SELECTOR_KINDS = SIMPLE_KINDS + COMPOUND_KINDS
# ``{any: [SELECTOR, ...]}``: the first alternative that selects exactly one statement (for code
# that differs between upstream releases).
ANY = "any"


@dataclass(frozen=True)
class Selector:
    """One statement inside a function, chosen structurally (never by line number)."""

    kind: str  # one of SELECTOR_KINDS
    value: str  # dotted callee, assigned name, or the compound statement's header
    pos: Pos
    within: Selector | None = None  # narrowed to the block(s) of this compound statement
    occurrence: int | None = None  # 1-based among the remaining matches, in source order
    alternatives: tuple[Selector, ...] = ()  # kind "any": tried in order

    def describe(self) -> str:
        if self.kind == ANY:
            return f"{{any: [{', '.join(a.describe() for a in self.alternatives)}]}}"
        text = f"{{{self.kind}: {self.value}}}"
        if self.within is not None:
            text += f" within {self.within.describe()}"
        if self.occurrence is not None:
            text += f" (occurrence {self.occurrence})"
        return text


# How a span is written into the code:
# - "try": start, then the covered statements inside try/finally (exception-safe; re-indents them);
# - "flat": start before and end after the covered statements, which keep their indentation. An
#   exception leaves the span to be ended by the enclosing span or the lifecycle; refused for
#   regions that can be left by return/break/continue;
# - "decorator": ``@otel.traced(...)`` on a whole function; attributes name its parameters.
SpanForm = Literal["try", "flat", "decorator"]
SPAN_FORMS: tuple[SpanForm, ...] = ("try", "flat", "decorator")

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


def version_key(text: str) -> tuple[int, ...] | None:
    """A comparable key of ``X.Y[.Z][{a,b,rc}N][.devN]`` (a pre-release sorts before its release),
    or None when ``text`` is not such a version."""
    match = VERSION.fullmatch(text.strip())
    if match is None:
        return None
    major, minor, patch, stage, number, dev = match.groups()
    rank = {"a": 1, "b": 2, "rc": 3, None: 4}[stage]
    key = (int(major), int(minor), int(patch or 0), rank, int(number or 0))
    return key + ((0, int(dev)) if dev is not None else (1, 0))


VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:(a|b|rc)(\d+))?(?:\.dev(\d+))?")
RELEASE_OPERATORS = (">=", "<=", "==", "!=", ">", "<")


@dataclass(frozen=True)
class Releases:
    """The upstream releases a span or hook applies to: ``>=0.18``, ``>=0.17, <0.19``..."""

    text: str
    # (operator, version key, how many release numbers the bound gives), all must hold
    clauses: tuple[tuple[str, tuple[int, ...], int], ...]
    pos: Pos
    reason: str = ""  # why the entry is not in the other releases, for the coverage page

    def contains(self, version: str) -> bool:
        key = version_key(version)
        if key is None:
            return False
        for op, bound, width in self.clauses:
            if op in ("==", "!="):  # ``==0.19`` is every 0.19.x; ``==0.19.2`` that one release
                same = key[:width] == bound[:width] if width < 3 else key == bound
                if same != (op == "=="):
                    return False
            elif not {">=": key >= bound, "<=": key <= bound, ">": key > bound, "<": key < bound}[op]:
                return False
        return True

    def why_not(self) -> str:
        return self.reason or f"only in megatron-core {self.text}"


@dataclass(frozen=True)
class Attribute:
    key: str
    expr: str  # a Python expression, evaluated in the instrumented function only when recording
    pos: Pos


class _Placed:
    """Where an entry names its file and function, for errors about either."""

    pos: Pos
    file_pos: Pos | None
    function_pos: Pos | None

    @property
    def where_file(self) -> Pos:
        return self.file_pos or self.pos

    @property
    def where_function(self) -> Pos:
        return self.function_pos or self.pos


@dataclass(frozen=True)
class Span(_Placed):
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
    form: SpanForm = "try"
    parents: tuple[str, ...] = ()  # spans of other functions this one runs inside, for the docs
    # per-name parents when the span has several names (each overrides ``parents`` for its name)
    name_parents: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def parents_of(self, name: str) -> tuple[str, ...]:
        return dict(self.name_parents).get(name, self.parents)

    when: str | None = None  # extra condition, evaluated only when the group records
    name_expr: str | None = None  # chooses among ``names`` at run time
    names: tuple[str, ...] = ()  # every name the span can take (``name`` is the first)
    releases: Releases | None = None  # the upstream releases it applies to (None: every one)
    when_pos: Pos | None = None
    name_expr_pos: Pos | None = None
    # the call whose returned (async) iterable the span is handed over to: it ends when that
    # iterable is exhausted, closed or abandoned, not when the covered statements complete
    stream: Selector | None = None


@dataclass(frozen=True)
class Call:
    """A ``call:`` payload: a call expression as the spec writes it."""

    text: str
    pos: Pos


@dataclass(frozen=True)
class Record:
    """A ``record:`` payload: metric values, recorded through the runtime's ``record_metrics``."""

    metrics: tuple[Attribute, ...]
    pos: Pos


@dataclass(frozen=True)
class Stamp:
    """A ``stamp:`` payload: attributes set on the current span (``set_current_attributes``)."""

    attributes: tuple[Attribute, ...]
    pos: Pos


@dataclass(frozen=True)
class AddFlag:
    """A ``flags:`` option: ``parser.add_argument(...)`` inserted into Megatron's parser."""

    parser: str  # the (dotted) name of the argparse parser or group
    flag: Flag
    pos: Pos


# What an entry/before/after hook inserts (its statement's text is made at transform time).
Payload = Call | Record | Stamp | AddFlag


@dataclass(frozen=True)
class WrapArgument:
    """``f(a)`` -> ``f(wrapper(a))``: the argument at a position, or a keyword's."""

    argument: int | str


@dataclass(frozen=True)
class WrapResult:
    """``f(a)`` -> ``wrapper("key", f(a))``: the call's result, recorded under an attribute key."""

    key: str


@dataclass(frozen=True, kw_only=True)
class _HookBase(_Placed):
    """What every hook has: where it is declared and whose function it edits."""

    file: str
    function: str
    pos: Pos
    note: str = ""
    file_pos: Pos | None = None
    function_pos: Pos | None = None
    releases: Releases | None = None  # the upstream releases it applies to (None: every one)


@dataclass(frozen=True, kw_only=True)
class EntryHook(_HookBase):
    """A call inserted at function entry (after the docstring)."""

    payload: Payload
    guard: str | None = None  # a runtime flag name ("JOB", "METRICS") the call is conditional on


@dataclass(frozen=True, kw_only=True)
class StatementHook(_HookBase):
    """A call inserted before (or, with ``after``, after) the statement ``selector`` chooses."""

    selector: Selector
    after: bool
    payload: Payload
    guard: str | None = None


@dataclass(frozen=True, kw_only=True)
class AroundHook(_HookBase):
    """``enter`` before the covered statements, ``exit`` in a ``finally:`` after them (at least
    one of the two)."""

    region: Region | None  # the covered statements (the whole function when None)
    enter: Call | None
    exit: Call | None
    guard: str | None = None


@dataclass(frozen=True, kw_only=True)
class WrapHook(_HookBase):
    """The one call ``selector`` names is rewritten (see :class:`WrapArgument`, :class:`WrapResult`)."""

    selector: Selector
    wrapper: str  # a dotted callable
    target: WrapArgument | WrapResult
    wrapper_pos: Pos


# A hook: a call into the runtime inserted at function entry, before/after a statement, around
# statements, or a rewrite of one call. Consumers narrow it with ``match``.
Hook = EntryHook | StatementHook | AroundHook | WrapHook


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
        """The name spec expressions call the runtime by (``otel.in_context``)."""
        return self.module.rpartition(".")[2]

    @property
    def binding(self) -> str:
        """The name instrumented files import the runtime as: private (``_otel``), so that a module
        without ``__all__`` gains no public name (``from module import *`` would export it)."""
        return "_" + self.alias

    @property
    def import_statement(self) -> str:
        """``import megatron.core.otel as _otel``: a line of its own, which isort keeps whole
        (``from megatron.core import otel as _otel`` would split a neighbouring
        ``from megatron.core import a, z`` around it)."""
        return f"import {self.module} as {self.binding}"


@dataclass(frozen=True)
class LifecycleSpan:
    """A span the runtime opens itself (startup, its backdated phases, the training intervals).

    ``role`` is one of: "startup" (root of the startup trace, opened backdated to program start),
    "phase" (backdated child of startup from the timestamps ``start`` to ``end``), "pre_startup"
    (a root of its own, backdated from ``start`` to ``end``), "interval" (``megatron.train``: one
    root per save_interval iterations, each linked to the previous one, the first to startup).
    """

    role: str
    name: str
    group: str
    pos: Pos
    goodput: bool = False
    start: str | None = None  # timestamp key
    end: str | None = None
    description: str = ""
    attributes: tuple[tuple[str, str], ...] = ()  # (key, what it holds): set by the runtime or its caller


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # "histogram" | "gauge" | "counter"
    unit: str
    description: str
    pos: Pos


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str  # as the user would write it; "" for unset
    description: str
    pos: Pos
    choices: tuple[str, ...] = ()  # valid values, when the set is closed
    timestamp: str | None = None  # the startup timestamp key this variable provides (epoch seconds)
    role: str | None = None  # what the runtime does with it: enabled, span_groups, exporter, ...


@dataclass(frozen=True)
class Flag:
    """A command-line flag inserted into Megatron's argument parser."""

    option: str  # "--otel-span-groups"
    dest: str  # "otel_span_groups"
    help: str
    pos: Pos
    action: str | None = None  # "store_true" or None for a valued option
    metavar: str | None = None
    env: str | None = None  # the environment variable this flag overrides


@dataclass(frozen=True)
class AttributeDecl:
    """An entry of ``attributes:``: the type (Weaver's names) and description of an attribute key."""

    key: str
    type: str | None
    brief: str
    pos: Pos
    note: str = ""
    compat: str = ""  # why a name breaking the semconv naming rules stays (no naming warning)


@dataclass(frozen=True)
class Project:
    runtime: Runtime
    upstream: UpstreamPin
    groups: tuple[Group, ...]
    presets: tuple[Preset, ...]
    spans: tuple[Span, ...]
    lifecycle: tuple[LifecycleSpan, ...] = ()
    metrics: tuple[Metric, ...] = ()
    env: tuple[EnvVar, ...] = ()
    flags: tuple[Flag, ...] = ()
    hooks: tuple[Hook, ...] = ()
    # the other releases the specs support (the pinned ``upstream`` is supported too)
    supported: tuple[UpstreamPin, ...] = ()
    attributes: tuple[AttributeDecl, ...] = ()  # declared attribute types (telemetry.yaml)

    def releases(self) -> tuple[UpstreamPin, ...]:
        """Every supported release, the pinned one included, oldest first."""
        pins = (*self.supported, self.upstream)
        return tuple(sorted(pins, key=lambda p: version_key(p.version) or ()))

    def entries(self) -> tuple[Span | Hook, ...]:
        """Every span and hook the specs place in the target's code, spans first."""
        return (*self.spans, *self.hooks)

    def for_release(self, version: str) -> tuple[Project, tuple[Span | Hook, ...]]:
        """The project as it applies to ``version``, and the entries its ``releases:`` exclude."""
        excluded = tuple(
            e for e in self.entries() if e.releases is not None and not e.releases.contains(version)
        )
        if not excluded:
            return self, ()
        out = {id(e) for e in excluded}
        return (
            replace(
                self,
                spans=tuple(s for s in self.spans if id(s) not in out),
                hooks=tuple(h for h in self.hooks if id(h) not in out),
            ),
            excluded,
        )

    def all_span_names(self) -> tuple[str, ...]:
        """Every span name the instrumented code and the runtime can emit, in declaration order."""
        names: dict[str, None] = {}
        for span in self.spans:
            names.update(dict.fromkeys(span.names or (span.name,)))
        names.update(dict.fromkeys(s.name for s in self.lifecycle))
        return tuple(names)

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

    def select_groups(self, names: str) -> frozenset[str]:
        """The groups a comma-separated list of group and preset names selects (case aside);
        ValueError naming the first unknown one and the valid names."""
        known = {g.name for g in self.groups}
        selected: set[str] = set()
        for item in (part.strip().lower() for part in names.split(",") if part.strip()):
            if item in known:
                selected.add(item)
            elif any(p.name == item for p in self.presets):
                selected.update(self.expand_preset(item))
            else:
                valid = ", ".join([p.name for p in self.presets] + sorted(known)) or "none declared"
                raise ValueError(f"unknown group or preset '{item}' (valid: {valid})")
        return frozenset(selected)

    def files(self) -> tuple[str, ...]:
        return tuple(sorted({s.file for s in self.spans}))
