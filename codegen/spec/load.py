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

import ast

from codegen.diagnostics import Diagnostics, Pos, SpecError
from codegen.spec.model import (
    COMPOUND_KINDS,
    SELECTOR_KINDS,
    SPAN_FORMS,
    Attribute,
    EnvVar,
    Flag,
    Group,
    Hook,
    LifecycleSpan,
    Metric,
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

TOP_KEYS = (
    "runtime", "upstream", "groups", "presets", "lifecycle", "metrics", "env", "flags", "file", "form", "spans",
    "hooks",
)
SINGLETON_KEYS = ("runtime", "upstream", "groups", "presets", "lifecycle", "metrics", "env", "flags")
SPAN_KEYS = (
    "name", "group", "file", "function", "around", "attributes", "end_attributes", "goodput", "note",
    "when", "names", "name_expr", "form", "parents",
)
HOOK_KEYS = (
    "file", "function", "entry", "before", "after", "around", "whole_function", "call", "enter", "exit",
    "guard", "record", "stamp", "note", "wrap",
)
WRAP_KEYS = ("call", "within", "occurrence", "argument", "result", "with")
LIFECYCLE_ROLES = ("startup", "pre_startup", "phases", "interval")
ENV_ROLES = (
    "enabled", "span_groups", "exporter", "traces_enabled", "metrics_enabled", "export_rank",
    "sigterm_flush_timeout", "service_name",
)
METRIC_KINDS = ("histogram", "gauge", "counter")
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
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            diags.error(Pos(display, 1, 1), f"not UTF-8 text (byte {exc.start})")
            continue
        root = load_yaml(display, text, diags)
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
        self.default_forms: dict[int, str] = {}  # id(span node) -> the file's default form
        self.hook_nodes: list[tuple[YMap, tuple[str, Pos] | None]] = []
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
        default_form = "try"
        if "form" in root.entries:
            default_form = self._form(root.get("form")) or "try"  # type: ignore[arg-type]
        spans_node = root.get("spans")
        if isinstance(spans_node, YSeq):
            for item in spans_node.items:
                self.default_forms[id(item)] = default_form
        for key, target in (("spans", self.span_nodes), ("hooks", self.hook_nodes)):
            entries = root.get(key)
            if entries is None:
                continue
            for item in self._seq(entries, key):
                if isinstance(item, YMap):
                    target.append((item, default_file))
                else:
                    self.diags.error(item.pos, f"each of '{key}' must be a mapping")

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
        group_names = {g.name for g in groups}
        spans = self._spans(group_names)
        lifecycle = self._lifecycle(group_names)
        metrics = self._metrics()
        env = self._env()
        flags, flag_hooks = self._flags(env, presets, groups)
        alias = runtime.alias if runtime is not None else "otel"
        hooks = self._hooks(group_names, {m.name for m in metrics}, alias) + flag_hooks
        self._check_unique_names(spans, lifecycle)
        known = {n for s in spans for n in (s.names or (s.name,))} | {s.name for s in lifecycle}
        for span in spans:
            for parent in {*span.parents, *(p for _, ps in span.name_parents for p in ps)}:
                if parent not in known:
                    self._unknown(span.pos, "parent span", parent, sorted(known))
        if runtime is None or upstream is None:
            return None
        return Project(
            runtime, upstream, groups, presets, spans, files, lifecycle, metrics, env, flags, hooks
        )

    # -- lifecycle, metrics, configuration ---------------------------------------------------

    def _lifecycle(self, group_names: set[str]) -> tuple[LifecycleSpan, ...]:
        entry = self.singletons.get("lifecycle")
        if entry is None:
            return ()
        node = self._map(entry[1], "lifecycle")
        if node is None:
            return ()
        self._check_keys(node, LIFECYCLE_ROLES, "lifecycle")
        out: list[LifecycleSpan] = []
        for role in LIFECYCLE_ROLES:
            value = node.get(role)
            if value is None:
                continue
            items = self._seq(value, "phases") if role == "phases" else (value,)
            for item in items:
                span = self._lifecycle_span("phase" if role == "phases" else role, item, group_names)
                if span is not None:
                    out.append(span)
        return tuple(out)

    def _lifecycle_span(self, role: str, node: YNode, group_names: set[str]) -> LifecycleSpan | None:
        as_map = self._map(node, f"lifecycle {role}")
        if as_map is None:
            return None
        keys = ("name", "group", "goodput", "start", "end", "description", "attributes")
        self._check_keys(as_map, keys, f"lifecycle {role}")
        attributes: list[tuple[str, str]] = []
        attrs_node = as_map.get("attributes")
        if attrs_node is not None:
            attrs_map = self._map(attrs_node, "attributes")
            for key, (key_pos, value) in (attrs_map.entries.items() if attrs_map else ()):
                text = self._str(value, f"attribute '{key}'")
                if not SPAN_NAME.match(key):
                    self.diags.error(key_pos, f"attribute key '{key}' must be dotted identifiers")
                elif text is not None:
                    attributes.append((key, text))
        name = self._required_str(as_map, "name", f"lifecycle {role}")
        group = self._str(as_map.get("group"), "group") if "group" in as_map.entries else "job"
        if group is not None and group not in group_names:
            self._unknown(as_map.get("group").pos, "group", group, sorted(group_names))  # type: ignore[union-attr]
            return None
        needs_times = role in ("phase", "pre_startup")
        start = self._required_str(as_map, "start", f"lifecycle {role}") if needs_times else None
        end = self._required_str(as_map, "end", f"lifecycle {role}") if needs_times else None
        goodput = self._bool(as_map.get("goodput"), "goodput") if "goodput" in as_map.entries else False
        description = self._str(as_map.get("description"), "description") or "" if "description" in as_map.entries else ""
        if name is None or group is None or (needs_times and (start is None or end is None)):
            return None
        return LifecycleSpan(role, name, group, as_map.pos, bool(goodput), start, end, description, tuple(attributes))

    def _metrics(self) -> tuple[Metric, ...]:
        entry = self.singletons.get("metrics")
        if entry is None:
            return ()
        out = []
        for item in self._seq(entry[1], "metrics"):
            as_map = self._map(item, "metric")
            if as_map is None:
                continue
            self._check_keys(as_map, ("name", "kind", "unit", "description"), "metric")
            name = self._required_str(as_map, "name", "metric")
            kind = self._required_str(as_map, "kind", "metric")
            unit = self._required_str(as_map, "unit", "metric")
            description = self._str(as_map.get("description"), "description") or ""
            if kind is not None and kind not in METRIC_KINDS:
                self._unknown(as_map.get("kind").pos, "metric kind", kind, list(METRIC_KINDS))  # type: ignore[union-attr]
                continue
            if name and kind and unit:
                out.append(Metric(name, kind, unit, description, as_map.pos))
        return tuple(out)

    def _env(self) -> tuple[EnvVar, ...]:
        entry = self.singletons.get("env")
        if entry is None:
            return ()
        out = []
        for item in self._seq(entry[1], "env"):
            as_map = self._map(item, "environment variable")
            if as_map is None:
                continue
            self._check_keys(as_map, ("name", "default", "description", "choices", "timestamp", "role"), "env")
            name = self._required_str(as_map, "name", "environment variable")
            default_node = as_map.get("default")
            default = ""
            if default_node is not None:
                if isinstance(default_node, YScalar) and isinstance(default_node.value, (str, int)) and not isinstance(default_node.value, bool):
                    default = str(default_node.value)
                else:
                    self.diags.error(default_node.pos, "default must be a string or an integer")
            description = self._str(as_map.get("description"), "description") or ""
            choices = tuple(
                c for c in (self._str(n, "choice") for n in self._seq(as_map.get("choices"), "choices")) if c
            ) if "choices" in as_map.entries else ()
            timestamp = self._str(as_map.get("timestamp"), "timestamp") if "timestamp" in as_map.entries else None
            role = self._str(as_map.get("role"), "role") if "role" in as_map.entries else None
            if role is not None and role not in ENV_ROLES:
                self._unknown(as_map.get("role").pos, "env role", role, list(ENV_ROLES))  # type: ignore[union-attr]
                role = None
            if choices and default and default not in choices:
                self.diags.error(default_node.pos, f"default '{default}' is not one of {', '.join(choices)}")  # type: ignore[union-attr]
            if name:
                out.append(EnvVar(name, default, description, as_map.pos, choices, timestamp, role))
        return tuple(out)

    def _flags(
        self, env: tuple[EnvVar, ...], presets: tuple[Preset, ...], groups: tuple[Group, ...]
    ) -> tuple[tuple[Flag, ...], tuple[Hook, ...]]:
        entry = self.singletons.get("flags")
        if entry is None:
            return (), ()
        node = self._map(entry[1], "flags")
        if node is None:
            return (), ()
        self._check_keys(node, ("file", "function", "before", "parser", "options"), "flags")
        file = self._required_str(node, "file", "flags")
        function = self._required_str(node, "function", "flags")
        parser = self._required_str(node, "parser", "flags")
        before_node = node.get("before")
        before = self._selector(before_node) if before_node is not None else None
        if before_node is None:
            self.diags.error(node.pos, "flags is missing 'before' (the statement the flags go before)")
        env_names = {e.name for e in env}
        flags: list[Flag] = []
        for item in self._seq(node.get("options") or YSeq((), node.pos), "options"):
            as_map = self._map(item, "flag")
            if as_map is None:
                continue
            self._check_keys(as_map, ("option", "action", "metavar", "env", "help"), "flag")
            option = self._required_str(as_map, "option", "flag")
            help_text = self._required_str(as_map, "help", "flag")
            action = self._str(as_map.get("action"), "action") if "action" in as_map.entries else None
            metavar = self._str(as_map.get("metavar"), "metavar") if "metavar" in as_map.entries else None
            env_name = self._str(as_map.get("env"), "env") if "env" in as_map.entries else None
            if option is not None and not re.fullmatch(r"--[a-z][a-z0-9-]*", option):
                self.diags.error(as_map.get("option").pos, f"option '{option}' must look like --otel-enabled")  # type: ignore[union-attr]
                continue
            if env_name is not None and env_name not in env_names:
                self._unknown(as_map.get("env").pos, "environment variable", env_name, sorted(env_names))  # type: ignore[union-attr]
                continue
            if action not in (None, "store_true"):
                self.diags.error(as_map.get("action").pos, "action must be 'store_true' or absent")  # type: ignore[union-attr]
                continue
            if option is None or help_text is None:
                continue
            try:
                help_text = help_text.format(
                    presets=", ".join(p.name for p in presets), groups=", ".join(g.name for g in groups)
                )
            except (KeyError, IndexError, ValueError) as exc:
                self.diags.error(as_map.get("help").pos, f"help text: unknown placeholder {exc} (use {{presets}} or {{groups}})")  # type: ignore[union-attr]
                continue
            dest = option[2:].replace("-", "_")
            flags.append(Flag(option, dest, help_text, as_map.pos, action, metavar, env_name))
        if file is None or function is None or parser is None or before is None:
            return tuple(flags), ()
        hooks = tuple(
            Hook(file, function, "before", flag.pos, selector=before, call=_add_argument(parser, flag), note=f"the {flag.option} flag")
            for flag in flags
        )
        return tuple(flags), hooks

    def _check_unique_names(self, spans: tuple[Span, ...], lifecycle: tuple[LifecycleSpan, ...]) -> None:
        code_names = {n for s in spans for n in (s.names or (s.name,))}
        seen: set[str] = set()
        for span in lifecycle:
            if span.name in code_names or span.name in seen:
                self.diags.error(span.pos, f"lifecycle span '{span.name}' is declared twice")
            seen.add(span.name)

    # -- hooks -------------------------------------------------------------------------------

    def _hooks(self, group_names: set[str], metric_names: set[str], alias: str) -> tuple[Hook, ...]:
        hooks = []
        for node, default_file in self.hook_nodes:
            hook = self._hook(node, default_file, group_names, metric_names, alias)
            if hook is not None:
                hooks.append(hook)
        return tuple(hooks)

    def _hook(
        self,
        node: YMap,
        default_file: tuple[str, Pos] | None,
        group_names: set[str],
        metric_names: set[str],
        alias: str,
    ) -> Hook | None:
        self._check_keys(node, HOOK_KEYS, "hook")
        if "file" in node.entries:
            file, file_pos = self._str(node.get("file"), "file"), node.get("file").pos  # type: ignore[union-attr]
        else:
            file, file_pos = default_file if default_file else (None, None)
        if file is None:
            self.diags.error(node.pos, "hook has no 'file' (set it on the hook or at the top of the spec file)")
            return None
        function = self._required_str(node, "function", "hook")
        if function is None:
            return None
        placements = [k for k in ("entry", "before", "after", "around", "whole_function", "wrap") if k in node.entries]
        if len(placements) != 1:
            self.diags.error(node.pos, "a hook needs exactly one of: entry, before, after, around, whole_function, wrap")
            return None
        kind = placements[0]
        if kind == "wrap":
            return self._wrap_hook(node, file, file_pos, function)
        payloads = [k for k in ("call", "record", "stamp") if k in node.entries]
        guard = None
        if "guard" in node.entries:
            guard_name = self._str(node.get("guard"), "guard")
            if guard_name is None:
                return None
            if guard_name not in group_names and guard_name != "metrics":
                self._unknown(node.get("guard").pos, "guard", guard_name, sorted(group_names) + ["metrics"])  # type: ignore[union-attr]
                return None
            guard = guard_name.upper()
        call = None
        if kind in ("around", "whole_function"):
            if payloads:
                self.diags.error(node.pos, "an around hook takes 'enter' and/or 'exit', not " + payloads[0])
                return None
            enter = self._call(node.get("enter"), "enter") if "enter" in node.entries else None
            exit_ = self._call(node.get("exit"), "exit") if "exit" in node.entries else None
            if enter is None and exit_ is None:
                self.diags.error(node.pos, "an around hook needs 'enter' or 'exit'")
                return None
            region = None
            if kind == "around":
                region = self._region(node.get("around"))  # type: ignore[arg-type]
                if region is None:
                    return None
            return Hook(
                file, function, "around", node.pos, region=region, enter=enter, exit=exit_, guard=guard,
                note=self._str(node.get("note"), "note") or "" if "note" in node.entries else "",
                file_pos=file_pos, function_pos=node.get("function").pos,  # type: ignore[union-attr]
            )
        if len(payloads) != 1:
            self.diags.error(node.pos, "a hook needs exactly one of: call, record, stamp")
            return None
        if payloads[0] == "call":
            call = self._call(node.get("call"), "call")
        elif payloads[0] == "record":
            attrs = self._attributes(node.get("record"), "record")
            if attrs is None:
                return None
            for attr in attrs:
                if attr.key not in metric_names:
                    self._unknown(attr.pos, "metric", attr.key, sorted(metric_names))
                    return None
            guard = guard or "METRICS"
            call = f"{alias}.record_metrics(lambda: {{" + ", ".join(f"{_quote(a.key)}: {a.expr}" for a in attrs) + "})"
        else:
            attrs = self._attributes(node.get("stamp"), "stamp")
            if attrs is None:
                return None
            call = f"{alias}.set_current_attributes(lambda: {{" + ", ".join(f"{_quote(a.key)}: {a.expr}" for a in attrs) + "})"
        if call is None:
            return None
        selector = None
        if kind in ("before", "after"):
            selector = self._selector(node.get(kind))  # type: ignore[arg-type]
            if selector is None:
                return None
        elif not (isinstance(node.get("entry"), YScalar) and node.get("entry").value is True):  # type: ignore[union-attr]
            self.diags.error(node.get("entry").pos, "entry must be true")  # type: ignore[union-attr]
            return None
        return Hook(
            file, function, kind, node.pos, selector=selector, call=call, guard=guard,  # type: ignore[arg-type]
            note=self._str(node.get("note"), "note") or "" if "note" in node.entries else "",
            file_pos=file_pos, function_pos=node.get("function").pos,  # type: ignore[union-attr]
        )

    def _wrap_hook(self, node: YMap, file: str, file_pos: Pos | None, function: str) -> Hook | None:
        spec = self._map(node.get("wrap"), "wrap")  # type: ignore[arg-type]
        if spec is None:
            return None
        self._check_keys(spec, WRAP_KEYS, "wrap")
        selector = self._selector(YMap({k: v for k, v in spec.entries.items() if k in ("call", "within", "occurrence")}, spec.pos))
        wrapper = self._required_str(spec, "with", "wrap")
        if wrapper is not None and not DOTTED.match(wrapper):
            self.diags.error(spec.get("with").pos, "'with' must be a dotted callable such as otel.in_context")  # type: ignore[union-attr]
            return None
        argument = result = None
        if ("argument" in spec.entries) == ("result" in spec.entries):
            self.diags.error(spec.pos, "wrap takes either 'argument' (an index) or 'result' (an attribute key)")
            return None
        if "argument" in spec.entries:
            arg_node = spec.get("argument")
            value = arg_node.value if isinstance(arg_node, YScalar) else None
            valid = (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
                isinstance(value, str) and IDENTIFIER.match(value)
            )
            if not valid:
                self.diags.error(arg_node.pos, "argument must be a position (0, 1, ...) or a keyword name")  # type: ignore[union-attr]
                return None
            argument = value  # type: ignore[assignment]
        else:
            result = self._str(spec.get("result"), "result")
        if selector is None or wrapper is None or (argument is None and result is None):
            return None
        if selector.kind != "call":
            self.diags.error(spec.pos, "wrap needs a 'call' selector")
            return None
        return Hook(
            file, function, "wrap", node.pos, selector=selector, wrapper=wrapper, argument=argument, result=result,
            note=self._str(node.get("note"), "note") or "" if "note" in node.entries else "",
            file_pos=file_pos, function_pos=node.get("function").pos,  # type: ignore[union-attr]
        )

    def _call(self, node: YNode | None, what: str) -> str | None:
        text = self._str(node, what)
        if text is None:
            return None
        try:
            expr = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as exc:
            self.diags.error(node.pos, f"{what}: '{text}' does not parse: {exc.msg}")  # type: ignore[union-attr]
            return None
        if not isinstance(expr, ast.Call):
            self.diags.error(node.pos, f"{what}: '{text}' must be a call")  # type: ignore[union-attr]
            return None
        return text

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
        when = self._expression(node.get("when"), "when") if "when" in node.entries else None
        parents: tuple[str, ...] = ()
        name_parents: list[tuple[str, tuple[str, ...]]] = []
        parents_node = node.get("parents")
        if isinstance(parents_node, YMap):  # {name: [parents]} for a span with several names
            for key, (key_pos, value) in parents_node.entries.items():
                if key != name and key not in [self._str(n, "name") for n in self._seq(node.get("names") or YSeq((), node.pos), "names")]:
                    self.diags.error(key_pos, f"'{key}' is not one of this span's names")
                    ok = False
                    continue
                name_parents.append((key, self._names(value, "parents")))
        elif parents_node is not None:
            parents = self._names(parents_node, "parents")
        form = self._form(node.get("form")) if "form" in node.entries else self.default_forms.get(id(node), "try")
        if form is None:
            ok = False
        elif form == "decorator":
            reason = None
            if node.get("around") is not None:
                reason = "a decorator covers the whole function: drop 'around'"
            elif "end_attributes" in node.entries or "when" in node.entries or "names" in node.entries:
                reason = "a decorator span takes no end_attributes, when or names"
            if reason:
                self.diags.error(node.get("form").pos if "form" in node.entries else node.pos, reason)  # type: ignore[union-attr]
                ok = False
        names: tuple[str, ...] = ()
        name_expr = None
        if ("names" in node.entries) != ("name_expr" in node.entries):
            self.diags.error(node.pos, "'names' (the other names) and 'name_expr' (the choice) go together")
            ok = False
        elif "names" in node.entries and name is not None:
            others = [self._str(n, "name") for n in self._seq(node.get("names"), "names")]  # type: ignore[arg-type]
            names = (name, *(o for o in others if o))
            name_expr = self._expression(node.get("name_expr"), "name_expr")
            if name_expr is not None:
                literals = {
                    n.value
                    for n in ast.walk(ast.parse(name_expr, mode="eval"))
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                }
                stray = sorted(str(x) for x in literals - set(names))
                if stray:
                    self.diags.error(node.get("name_expr").pos, f"name_expr names {', '.join(stray)}, not in the span's names")  # type: ignore[union-attr]
                    ok = False
        if ("when" in node.entries and when is None) or ("name_expr" in node.entries and name_expr is None):
            ok = False
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
            when=when,
            name_expr=name_expr,
            names=names,
            form=form,  # type: ignore[arg-type]
            parents=parents,
            name_parents=tuple(name_parents),
        )

    def _names(self, node: YNode, what: str) -> tuple[str, ...]:
        return tuple(n for n in (self._str(item, what) for item in self._seq(node, what)) if n)

    def _form(self, node: YNode) -> str | None:
        form = self._str(node, "form")
        if form is not None and form not in SPAN_FORMS:
            self._unknown(node.pos, "form", form, list(SPAN_FORMS))
            return None
        return form

    def _expression(self, node: YNode | None, what: str) -> str | None:
        text = self._str(node, what)
        if text is None:
            return None
        try:
            ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            self.diags.error(node.pos, f"{what}: '{text}' does not parse: {exc.msg}")  # type: ignore[union-attr]
            return None
        return " ".join(text.split())

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
                ast.parse(header)
            except SyntaxError:
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
                ast.parse(expr.strip(), mode="eval")
            except SyntaxError as exc:
                self.diags.error(value.pos, f"attribute '{key}': expression '{expr}' does not parse: {exc.msg}")
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


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _add_argument(parser: str, flag: Flag) -> str:
    args = [_quote(flag.option)]
    if flag.action:
        args.append(f"action={_quote(flag.action)}")
    else:
        args.append("default=None")
    if flag.metavar:
        args.append(f"metavar={_quote(flag.metavar)}")
    args.append(f"help={_quote(flag.help)}")
    return f"{parser}.add_argument({', '.join(args)})"
