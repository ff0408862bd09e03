"""Turn a directory of YAML spec files into a validated :class:`Project`.

Everything that can be checked without the Megatron sources is checked here: keys, types, group
and preset names, attribute expressions, duplicate spans. Problems are collected, never raised one
at a time, so a run reports all of them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import libcst as cst

from codegen.diagnostics import Diagnostics, Pos, SpecError
from codegen.spec.model import (
    COMPOUND_KINDS,
    SELECTOR_KINDS,
    Attribute,
    Group,
    Preset,
    Project,
    Region,
    Runtime,
    Selector,
    Span,
)
from codegen.spec.yaml_nodes import YMap, YNode, YScalar, YSeq, load_yaml
from codegen.upstream import UpstreamPin

T = TypeVar("T")

TOP_KEYS = ("runtime", "upstream", "groups", "presets", "file", "spans")
SINGLETON_KEYS = ("runtime", "upstream", "groups", "presets")
SPAN_KEYS = ("name", "group", "file", "function", "around", "attributes", "end_attributes", "goodput", "note")
SELECTOR_MODIFIERS = ("within", "occurrence")
REGION_KEYS = SELECTOR_KINDS + SELECTOR_MODIFIERS + ("from", "to", "after", "body", "branch")

SPAN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
GROUP_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def spec_files(spec_dir: Path) -> list[Path]:
    if spec_dir.is_file():
        return [spec_dir]
    return sorted(p for p in spec_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_project(spec_dir: Path, diags: Diagnostics | None = None) -> Project:
    """Load and validate every spec file of ``spec_dir``.

    Without ``diags``, any problem raises :class:`SpecError`. With it, problems are added there and
    the spans that are valid are still returned, so that later stages can report theirs too; only
    a project missing its declarations raises.
    """
    collect = diags is not None
    diags = diags if diags is not None else Diagnostics()
    files = spec_files(spec_dir)
    if not files:
        diags.error(Pos(str(spec_dir), 1, 1), "no spec files (*.yaml) found")
        raise SpecError(diags)
    builder = _Builder(diags)
    for path in files:
        display = _display_path(path)
        root = load_yaml(display, path.read_text(encoding="utf-8"), diags)
        if root is not None:
            builder.add_file(display, root)
    project = builder.finish(tuple(_display_path(p) for p in files))
    if project is None or (diags and not collect):
        raise SpecError(diags)
    return project


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class _Builder:
    def __init__(self, diags: Diagnostics) -> None:
        self.diags = diags
        self.singletons: dict[str, tuple[str, YNode]] = {}
        self.span_nodes: list[tuple[YMap, tuple[str, Pos] | None]] = []
        self.first_pos: Pos | None = None

    # -- collection -------------------------------------------------------------------------

    def add_file(self, path: str, root: YNode) -> None:
        if self.first_pos is None:
            self.first_pos = Pos(path, 1, 1)
        if not isinstance(root, YMap):
            self.diags.error(root.pos, "a spec file must be a mapping")
            return
        self._check_keys(root, TOP_KEYS, "spec file")
        for key in SINGLETON_KEYS:
            node = root.get(key)
            if node is None:
                continue
            if key in self.singletons:
                first = self.singletons[key][1].pos
                self.diags.error(root.key_pos(key), f"'{key}' is already declared at {first.ref(root.key_pos(key))}")
                continue
            self.singletons[key] = (path, node)
        default_file = None
        if "file" in root.entries:
            name = self._str(root.get("file"), "file")
            default_file = (name, root.get("file").pos) if name is not None else None  # type: ignore[union-attr]
        spans = root.get("spans")
        if spans is not None:
            for item in self._seq(spans, "spans"):
                if isinstance(item, YMap):
                    self.span_nodes.append((item, default_file))
                else:
                    self.diags.error(item.pos, "a span must be a mapping")

    # -- building ---------------------------------------------------------------------------

    def finish(self, files: tuple[str, ...]) -> Project | None:
        assert self.first_pos is not None
        for key in ("runtime", "upstream", "groups"):
            if key not in self.singletons:
                self.diags.error(self.first_pos, f"missing '{key}': declare it in one spec file")
        runtime = self._runtime()
        upstream = self._upstream()
        groups = self._groups()
        presets = self._presets({g.name for g in groups})
        spans = self._spans({g.name for g in groups})
        if runtime is None or upstream is None:
            return None
        return Project(runtime, upstream, groups, presets, spans, files)

    def _runtime(self) -> Runtime | None:
        entry = self.singletons.get("runtime")
        if entry is None:
            return None
        node = self._map(entry[1], "runtime")
        if node is None:
            return None
        self._check_keys(node, ("package",), "runtime")
        package = self._required_str(node, "package", "runtime")
        if package is None:
            return None
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)+", package):
            self.diags.error(node.get("package").pos, "runtime package must be a path like 'megatron/core/otel'")  # type: ignore[union-attr]
            return None
        return Runtime(package, node.pos)

    def _upstream(self) -> UpstreamPin | None:
        entry = self.singletons.get("upstream")
        if entry is None:
            return None
        node = self._map(entry[1], "upstream")
        if node is None:
            return None
        keys = ("distribution", "version", "filename", "sha256")
        self._check_keys(node, keys, "upstream")
        values = [self._required_str(node, k, "upstream") for k in keys]
        if any(v is None for v in values):
            return None
        sha = values[3]
        assert sha is not None
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            self.diags.error(node.get("sha256").pos, "sha256 must be 64 lowercase hex digits")  # type: ignore[union-attr]
        return UpstreamPin(*values)  # type: ignore[arg-type]

    def _groups(self) -> tuple[Group, ...]:
        entry = self.singletons.get("groups")
        if entry is None:
            return ()
        node = self._map(entry[1], "groups")
        if node is None:
            return ()
        groups = []
        for name, (key_pos, value) in node.entries.items():
            if not GROUP_NAME.match(name):
                self.diags.error(key_pos, f"group name '{name}' must be lower_snake_case")
                continue
            description = self._str(value, f"description of group '{name}'") or ""
            groups.append(Group(name, description, key_pos))
        return tuple(groups)

    def _presets(self, group_names: set[str]) -> tuple[Preset, ...]:
        entry = self.singletons.get("presets")
        if entry is None:
            return ()
        node = self._map(entry[1], "presets")
        if node is None:
            return ()
        presets: list[Preset] = []
        names = set(node.entries)
        for name, (key_pos, value) in node.entries.items():
            if name in group_names:
                self.diags.error(key_pos, f"preset '{name}' has the name of a group")
                continue
            description = ""
            members_node: YNode = value
            if isinstance(value, YMap):
                self._check_keys(value, ("groups", "description"), f"preset '{name}'")
                description = self._str(value.get("description"), "description") or ""
                members_node = value.get("groups") or YSeq((), value.pos)
            members: list[str] = []
            for item in self._seq(members_node, f"groups of preset '{name}'"):
                member = self._str(item, "preset member")
                if member is None:
                    continue
                if member != "*" and member not in group_names and member not in names:
                    self._unknown(item.pos, "group or preset", member, sorted(group_names | names))
                    continue
                if member == name:
                    self.diags.error(item.pos, f"preset '{name}' includes itself")
                    continue
                members.append(member)
            presets.append(Preset(name, tuple(members), key_pos, description))
        return tuple(presets)

    def _spans(self, group_names: set[str]) -> tuple[Span, ...]:
        spans: list[Span] = []
        seen: dict[tuple[str, str, str, str], Pos] = {}
        name_groups: dict[str, tuple[str, Pos]] = {}
        for node, default_file in self.span_nodes:
            span = self._span(node, default_file, group_names)
            if span is None:
                continue
            key = (span.file, span.function, span.name, span.region.describe())
            if key in seen:
                self.diags.error(span.pos, f"duplicate span '{span.name}': the same place is already instrumented at {seen[key].ref(span.pos)}")
                continue
            seen[key] = span.pos
            previous = name_groups.setdefault(span.name, (span.group, span.pos))
            if previous[0] != span.group:
                self.diags.error(
                    span.pos,
                    f"span '{span.name}' is in group '{span.group}' here but in '{previous[0]}' at {previous[1].ref(span.pos)}",
                )
                continue
            spans.append(span)
        return tuple(spans)

    def _span(self, node: YMap, default_file: tuple[str, Pos] | None, group_names: set[str]) -> Span | None:
        self._check_keys(node, SPAN_KEYS, "span")
        ok = True
        name = self._required_str(node, "name", "span")
        if name is not None and not SPAN_NAME.match(name):
            self.diags.error(node.get("name").pos, f"span name '{name}' must be dotted identifiers")  # type: ignore[union-attr]
            ok = False
        group = self._required_str(node, "group", "span")
        if group is not None and group not in group_names:
            self._unknown(node.get("group").pos, "group", group, sorted(group_names))  # type: ignore[union-attr]
            ok = False
        if "file" in node.entries:
            file, file_pos = self._str(node.get("file"), "file"), node.get("file").pos  # type: ignore[union-attr]
        else:
            file, file_pos = default_file if default_file else (None, None)
        if file is None:
            self.diags.error(node.pos, "span has no 'file' (set it on the span or at the top of the spec file)")
            ok = False
        elif file.startswith("/") or ".." in Path(file).parts or not file.endswith(".py"):
            self.diags.error(file_pos or node.pos, f"file '{file}' must be a relative path to a .py file inside the source root")
            ok = False
        function = self._required_str(node, "function", "span")
        if function is not None and not DOTTED.match(function):
            self.diags.error(node.get("function").pos, f"function '{function}' must be 'name' or 'Class.method'")  # type: ignore[union-attr]
            ok = False
        around = node.get("around")
        region = self._region(around) if around is not None else Region("function", node.pos)
        attributes = self._attributes(node.get("attributes"), "attributes")
        end_attributes = self._attributes(node.get("end_attributes"), "end_attributes")
        goodput = self._bool(node.get("goodput"), "goodput") if "goodput" in node.entries else False
        note = self._str(node.get("note"), "note") or "" if "note" in node.entries else ""
        if not ok or None in (name, group, file, function, region, attributes, end_attributes, goodput):
            return None
        return Span(
            name=name,  # type: ignore[arg-type]
            group=group,  # type: ignore[arg-type]
            file=file,  # type: ignore[arg-type]
            function=function,  # type: ignore[arg-type]
            region=region,  # type: ignore[arg-type]
            pos=node.pos,
            attributes=attributes,  # type: ignore[arg-type]
            end_attributes=end_attributes,  # type: ignore[arg-type]
            goodput=bool(goodput),
            note=note,
            file_pos=file_pos,
            function_pos=node.get("function").pos,  # type: ignore[union-attr]
        )

    def _region(self, node: YNode) -> Region | None:
        as_map = self._map(node, "around")
        if as_map is None:
            return None
        self._check_keys(as_map, REGION_KEYS, "around")
        keys = set(as_map.entries)
        if "from" in keys or "to" in keys:
            if not {"from", "to"} <= keys or keys - {"from", "to"}:
                self.diags.error(as_map.pos, "a range takes exactly 'from' and 'to' selectors")
                return None
            first, last = self._selector(as_map.get("from")), self._selector(as_map.get("to"))  # type: ignore[arg-type]
            return Region("range", as_map.pos, first, last) if first and last else None
        if "after" in keys:
            if keys != {"after"}:
                self.diags.error(as_map.pos, "'after' takes no other keys")
                return None
            first = self._selector(as_map.get("after"))  # type: ignore[arg-type]
            return Region("after", as_map.pos, first) if first else None
        if "body" in keys:
            if keys - {"body", "branch"}:
                self.diags.error(as_map.pos, "'body' takes only 'branch'")
                return None
            branch = self._str(as_map.get("branch"), "branch") if "branch" in keys else "body"
            if branch not in ("body", "else"):
                self.diags.error(as_map.get("branch").pos, "branch must be 'body' or 'else'")  # type: ignore[union-attr]
                return None
            first = self._selector(as_map.get("body"))  # type: ignore[arg-type]
            if first is not None and first.kind not in COMPOUND_KINDS:
                self.diags.error(first.pos, f"'body' needs a compound statement selector ({', '.join(COMPOUND_KINDS)})")
                return None
            return Region("body", as_map.pos, first, branch=branch) if first else None  # type: ignore[arg-type]
        if "branch" in keys:
            self.diags.error(as_map.key_pos("branch"), "'branch' is only valid with 'body'")
            return None
        first = self._selector(as_map)
        return Region("statement", as_map.pos, first) if first else None

    def _selector(self, node: YNode) -> Selector | None:
        as_map = self._map(node, "selector")
        if as_map is None:
            return None
        kinds = [k for k in as_map.entries if k in SELECTOR_KINDS]
        extra = [k for k in as_map.entries if k not in SELECTOR_KINDS + SELECTOR_MODIFIERS]
        for key in extra:
            self._unknown(as_map.key_pos(key), "selector key", key, list(SELECTOR_KINDS + SELECTOR_MODIFIERS))
        if len(kinds) != 1:
            self.diags.error(as_map.pos, f"a selector needs exactly one of: {', '.join(SELECTOR_KINDS)}")
            return None
        kind = kinds[0]
        value_node = as_map.get(kind)
        assert value_node is not None
        value = self._str(value_node, kind)
        if value is None or extra:
            return None
        value = " ".join(value.split())
        if kind == "call" and not DOTTED.match(value):
            self.diags.error(value_node.pos, f"call selector '{value}' must be a dotted name such as self._forward_mlp")
            return None
        if kind == "assign" and not IDENTIFIER.match(value):
            self.diags.error(value_node.pos, f"assign selector '{value}' must be a plain variable name")
            return None
        if kind in COMPOUND_KINDS and kind != "try":
            header = f"{kind} {value}:\n    pass\n" if kind != "with" else f"with {value}:\n    pass\n"
            try:
                cst.parse_statement(header)
            except cst.ParserSyntaxError:
                self.diags.error(value_node.pos, f"'{kind}' selector header '{value}' does not parse as Python")
                return None
        within = None
        if "within" in as_map.entries:
            within = self._selector(as_map.get("within"))  # type: ignore[arg-type]
            if within is None:
                return None
            if within.kind not in COMPOUND_KINDS:
                self.diags.error(within.pos, "'within' needs a compound statement selector")
                return None
        occurrence = None
        if "occurrence" in as_map.entries:
            occ_node = as_map.get("occurrence")
            assert occ_node is not None
            if not isinstance(occ_node, YScalar) or isinstance(occ_node.value, bool) or not isinstance(occ_node.value, int) or occ_node.value < 1:
                self.diags.error(occ_node.pos, "occurrence must be a positive integer")
                return None
            occurrence = occ_node.value
        return Selector(kind, value, value_node.pos, within, occurrence)

    def _attributes(self, node: YNode | None, what: str) -> tuple[Attribute, ...] | None:
        if node is None:
            return ()
        as_map = self._map(node, what)
        if as_map is None:
            return None
        attributes = []
        ok = True
        for key, (key_pos, value) in as_map.entries.items():
            if not SPAN_NAME.match(key):
                self.diags.error(key_pos, f"attribute key '{key}' must be dotted identifiers")
                ok = False
                continue
            expr = self._str(value, f"attribute '{key}'") if not isinstance(value, YScalar) or isinstance(value.value, str) else repr(value.value)
            if expr is None:
                ok = False
                continue
            try:
                cst.parse_expression(expr)
            except cst.ParserSyntaxError as exc:
                self.diags.error(value.pos, f"attribute '{key}': expression '{expr}' does not parse: {exc.message}")
                ok = False
                continue
            attributes.append(Attribute(key, expr, value.pos))
        return tuple(attributes) if ok else None

    # -- typed accessors ----------------------------------------------------------------------

    def _check_keys(self, node: YMap, allowed: tuple[str, ...], what: str) -> None:
        for key in node.entries:
            if key not in allowed:
                self._unknown(node.key_pos(key), f"key in {what}", key, list(allowed))

    def _unknown(self, pos: Pos, what: str, name: str, valid: list[str]) -> None:
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        self.diags.error(pos, f"unknown {what} '{name}'{hint} (valid: {', '.join(valid)})")

    def _typed(self, node: YNode | None, what: str, check: Callable[[object], bool], expected: str) -> object | None:
        if node is None:
            return None
        if isinstance(node, YScalar) and check(node.value):
            return node.value
        found = "a mapping" if isinstance(node, YMap) else "a list" if isinstance(node, YSeq) else type(node.value).__name__
        self.diags.error(node.pos, f"{what} must be {expected}, not {found}")
        return None

    def _str(self, node: YNode | None, what: str) -> str | None:
        value = self._typed(node, what, lambda v: isinstance(v, str), "a string")
        return value if isinstance(value, str) else None

    def _bool(self, node: YNode | None, what: str) -> bool | None:
        value = self._typed(node, what, lambda v: isinstance(v, bool), "true or false")
        return value if isinstance(value, bool) else None

    def _required_str(self, node: YMap, key: str, what: str) -> str | None:
        if key not in node.entries:
            self.diags.error(node.pos, f"{what} is missing '{key}'")
            return None
        return self._str(node.get(key), key)

    def _map(self, node: YNode, what: str) -> YMap | None:
        if isinstance(node, YMap):
            return node
        self.diags.error(node.pos, f"{what} must be a mapping")
        return None

    def _seq(self, node: YNode, what: str) -> tuple[YNode, ...]:
        if isinstance(node, YSeq):
            return node.items
        self.diags.error(node.pos, f"{what} must be a list")
        return ()
