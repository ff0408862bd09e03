"""Project-wide declarations: upstream pin, runtime package, groups, presets, lifecycle spans,
metrics, environment variables and command-line flags."""

from __future__ import annotations

import re

from codegen.diagnostics import Pos
from codegen.spec import fields
from codegen.spec.model import (
    AddFlag,
    EnvVar,
    Flag,
    Group,
    Hook,
    LifecycleSpan,
    Metric,
    Preset,
    Runtime,
    StatementHook,
)
from codegen.spec.reader import DOTTED, GROUP_NAME
from codegen.spec.selectors import SelectorReader
from codegen.spec.vocabulary import (
    ENV_ROLES,
    EXPORTERS,
    LIFECYCLE_KEYS,
    METRIC_KINDS,
    RESERVED_GROUP_NAMES,
    env_role,
)
from codegen.spec.yaml_nodes import YMap, YNode, YSeq
from codegen.upstream import UpstreamPin

PRESET_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


class SettingsReader(SelectorReader):
    def _runtime(self) -> Runtime | None:
        node = self._singleton_map("runtime")
        if node is None:
            return None
        package = self._fields(node, fields.RUNTIME_FIELDS, "runtime").get("package")
        if package is None:
            return None
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)+", package):
            self.diags.error(
                node.value_pos("package"), "runtime package must be a path like 'megatron/core/otel'"
            )
            return None
        return Runtime(package, node.pos)

    def _upstream(self) -> UpstreamPin | None:
        node = self._singleton_map("upstream")
        if node is None:
            return None
        values = self._fields(node, fields.UPSTREAM_FIELDS, "upstream")
        distribution, version, filename, sha = (
            values.get(k) for k in ("distribution", "version", "filename", "sha256")
        )
        if distribution is None or version is None or filename is None or sha is None:
            return None
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            self.diags.error(node.value_pos("sha256"), "sha256 must be 64 lowercase hex digits")
        return UpstreamPin(distribution, version, filename, sha)

    def _groups(self) -> tuple[Group, ...]:
        node = self._singleton_map("groups")
        if node is None:
            return ()
        groups = []
        for name, (key_pos, value) in node.entries.items():
            if not GROUP_NAME.match(name):
                self.diags.error(key_pos, f"group name '{name}' must be lower_snake_case")
                continue
            if name in RESERVED_GROUP_NAMES:
                self.diags.error(
                    key_pos,
                    f"group name '{name}' is reserved: the runtime already uses {name.upper()} "
                    f"(reserved: {', '.join(sorted(RESERVED_GROUP_NAMES))})",
                )
                continue
            description = self._str(value, f"description of group '{name}'") or ""
            groups.append(Group(name, description, key_pos))
        return tuple(groups)

    def _presets(self, group_names: set[str]) -> tuple[Preset, ...]:
        node = self._singleton_map("presets")
        if node is None:
            return ()
        presets: list[Preset] = []
        names = set(node.entries)
        for name, (key_pos, value) in node.entries.items():
            if name.lower() in group_names:  # --otel-span-groups names both, case-insensitively
                self.diags.error(key_pos, f"preset '{name}' has the name of a group")
                continue
            if not PRESET_NAME.match(name):
                self.diags.error(key_pos, f"preset name '{name}' must be letters, digits, '_' or '-'")
                continue
            description = ""
            members_node: YNode = value
            if isinstance(value, YMap):
                description = (
                    self._fields(value, fields.PRESET_FIELDS, f"preset '{name}'").get("description") or ""
                )
                members_node = value.get("groups") or YSeq((), value.pos)
            members: list[str] = []
            for item in self._seq(members_node, f"groups of preset '{name}'"):
                member = self._str(item, "preset member")
                if member is None:
                    continue
                if member != "*" and member not in group_names and member not in names:
                    self._unknown(item.pos, "group or preset", member, sorted(group_names | names), "groups")
                    continue
                if member == name:
                    self.diags.error(item.pos, f"preset '{name}' includes itself")
                    continue
                members.append(member)
            presets.append(Preset(name, tuple(members), key_pos, description))
        return tuple(presets)

    def _lifecycle(self, group_names: set[str]) -> tuple[LifecycleSpan, ...]:
        node = self._singleton_map("lifecycle")
        if node is None:
            return ()
        self._check_keys(node, tuple(LIFECYCLE_KEYS), "lifecycle")
        out: list[LifecycleSpan] = []
        for key, role in LIFECYCLE_KEYS.items():
            value = node.get(key)
            if value is None:
                continue
            items = self._seq(value, key) if key == "phases" else (value,)
            for item in items:
                span = self._lifecycle_span(role, item, group_names)
                if span is not None:
                    out.append(span)
        return tuple(out)

    def _lifecycle_span(self, role: str, node: YNode, group_names: set[str]) -> LifecycleSpan | None:
        as_map = self._map(node, f"lifecycle {role}")
        if as_map is None:
            return None
        values = self._fields(as_map, fields.LIFECYCLE_SPAN_FIELDS, f"lifecycle {role}", role)
        attributes = values.get("attributes", ())
        name = values.get("name")
        group = values.get("group", "job")
        if group is not None and group not in group_names:
            where = as_map.get("group")
            if where is not None:
                self._unknown(where.pos, "group", group, sorted(group_names), "groups")
            elif "groups" not in self.incomplete:
                self.diags.error(
                    as_map.pos,
                    f"lifecycle {role} names no 'group' and its default group '{group}' is not declared "
                    f"(declared: {', '.join(sorted(group_names)) or 'none'})",
                )
            return None
        # the timestamps a role requires (its spans are backdated); others have none
        timed = fields.required(fields.LIFECYCLE_SPAN_FIELDS, role)
        start = values.get("start") if "start" in timed else None
        end = values.get("end") if "end" in timed else None
        goodput = values.get("goodput", False)
        description = values.get("description") or ""
        if name is None or group is None or any(values.get(key) is None for key in timed):
            return None
        return LifecycleSpan(
            role, name, group, as_map.pos, bool(goodput), start, end, description, attributes
        )

    def _metrics(self) -> tuple[Metric, ...]:
        entry = self.singletons.get("metrics")
        if entry is None:
            return ()
        out: list[Metric] = []
        seen: dict[str, Metric] = {}
        for item in self._seq(entry[1], "metrics"):
            as_map = self._map(item, "metric")
            if as_map is None:
                continue
            values = self._fields(as_map, fields.METRIC_FIELDS, "metric")
            name, kind, unit = values.get("name"), values.get("kind"), values.get("unit")
            description = values.get("description") or ""
            if kind is not None and kind not in METRIC_KINDS:
                self._unknown(as_map.value_pos("kind"), "metric kind", kind, list(METRIC_KINDS))
                continue
            if name in seen:
                first = seen[name].pos.ref(as_map.pos)
                self.diags.error(as_map.value_pos("name"), f"metric '{name}' is already declared at {first}")
                continue
            if name and kind and unit:
                seen[name] = Metric(name, kind, unit, description, as_map.pos)
                out.append(seen[name])
        return tuple(out)

    def _env(self) -> tuple[EnvVar, ...]:
        entry = self.singletons.get("env")
        if entry is None:
            return ()
        out: list[EnvVar] = []
        names: dict[str, EnvVar] = {}
        roles: dict[str, EnvVar] = {}
        for item in self._seq(entry[1], "env"):
            as_map = self._map(item, "environment variable")
            if as_map is None:
                continue
            values = self._fields(as_map, fields.ENV_FIELDS, "environment variable", keys_of="env")
            name = values.get("name")
            default = values.get("default") or ""
            description = values.get("description") or ""
            choices = values.get("choices", ())
            timestamp = values.get("timestamp")
            role = values.get("role")
            if role is not None and role not in ENV_ROLES:
                self._unknown(as_map.value_pos("role"), "env role", role, list(ENV_ROLES))
                role = None
            if choices and default and default not in choices:
                self.diags.error(
                    as_map.value_pos("default"), f"default '{default}' is not one of {', '.join(choices)}"
                )
            if not name:
                continue
            var = EnvVar(name, default, description, as_map.pos, choices, timestamp, role)
            if self._env_clash(var, as_map, names, roles):
                continue
            out.append(var)
        return tuple(out)

    def _env_clash(self, var: EnvVar, node: YMap, names: dict[str, EnvVar], roles: dict[str, EnvVar]) -> bool:
        """Report a second variable of the same name or role, or exporters the runtime lacks."""
        where = node.value_pos("name")
        if var.name in names:
            self.diags.error(
                where,
                f"environment variable '{var.name}' is already declared at {names[var.name].pos.ref(where)}",
            )
            return True
        names[var.name] = var
        role = env_role(var.name, var.role)
        if role is None:
            return False
        if role in roles:
            implied = "" if var.role else f" (implied by its name {var.name})"
            self.diags.error(
                node.value_pos("role") if var.role else where,
                f"a second variable with role '{role}'{implied}: {roles[role].name} has it at "
                f"{roles[role].pos.ref(where)}",
            )
            return True
        roles[role] = var
        unknown = [c for c in var.choices if c not in EXPORTERS] if role == "exporter" else []
        if unknown:
            self.diags.error(
                node.value_pos("choices"),
                f"unsupported exporter(s) {', '.join(unknown)} (the runtime supports {', '.join(EXPORTERS)})",
            )
            return True
        return False

    def _flags(
        self, env: tuple[EnvVar, ...], presets: tuple[Preset, ...], groups: tuple[Group, ...]
    ) -> tuple[tuple[Flag, ...], tuple[Hook, ...]]:
        node = self._singleton_map("flags")
        if node is None:
            return (), ()
        values = self._fields(node, fields.FLAGS_FIELDS, "flags")
        file, function, parser = values.get("file"), values.get("function"), values.get("parser")
        if parser is not None and not DOTTED.match(parser):
            message = f"parser '{parser}' must be the (dotted) name of the argparse parser or group"
            self.diags.error(node.value_pos("parser"), message)
            parser = None
        before = values.get("before")
        env_names = {e.name: " ".join(e.description.split()) for e in env}
        flags: list[Flag] = []
        options: dict[str, Pos] = {}
        for item in self._seq(node.get("options") or YSeq((), node.pos), "options"):
            flag = self._flag(item, env_names, options, presets, groups)
            if flag is not None:
                flags.append(flag)
        if file is None or function is None or parser is None or before is None:
            return tuple(flags), ()
        hooks = tuple(
            StatementHook(
                file=file,
                function=function,
                pos=flag.pos,
                selector=before,
                after=False,
                payload=AddFlag(parser, flag, flag.pos),
                note=f"the {flag.option} flag",
            )
            for flag in flags
        )
        return tuple(flags), hooks

    def _flag(
        self,
        item: YNode,
        env_names: dict[str, str],
        options: dict[str, Pos],
        presets: tuple[Preset, ...],
        groups: tuple[Group, ...],
    ) -> Flag | None:
        """One of ``flags: options:`` (None when invalid); ``options`` collects the names seen."""
        as_map = self._map(item, "flag")
        if as_map is None:
            return None
        values = self._fields(as_map, fields.FLAG_FIELDS, "flag")
        option, help_text = values.get("option"), values.get("help")
        action, metavar, env_name = values.get("action"), values.get("metavar"), values.get("env")
        if option is not None and not re.fullmatch(r"--[a-z][a-z0-9-]*", option):
            self.diags.error(as_map.value_pos("option"), f"option '{option}' must look like --otel-enabled")
            return None
        if env_name is not None and env_name not in env_names:
            self._unknown(as_map.value_pos("env"), "environment variable", env_name, sorted(env_names), "env")
            return None
        if action not in (None, "store_true"):
            self.diags.error(as_map.value_pos("action"), "action must be 'store_true' or absent")
            return None
        if option is None or help_text is None:
            return None
        if option in options:
            where = as_map.value_pos("option")
            self.diags.error(where, f"option '{option}' is already declared at {options[option].ref(where)}")
            return None
        options[option] = as_map.value_pos("option")
        # argparse shows help text with its whitespace folded; so do the generated call and docs
        help_text = " ".join(help_text.split())
        if "{env}" in help_text and env_name is None:
            self.diags.error(as_map.value_pos("help"), "help text: {env} needs the flag's 'env:'")
            return None
        try:
            help_text = help_text.format(
                presets=", ".join(p.name for p in presets),
                groups=", ".join(g.name for g in groups),
                env=env_names.get(env_name or "", ""),
            )
        except (KeyError, IndexError, ValueError) as exc:
            self.diags.error(
                as_map.value_pos("help"),
                f"help text: unknown placeholder {exc} (use {{presets}}, {{groups}} or {{env}})",
            )
            return None
        dest = option[2:].replace("-", "_")
        return Flag(option, dest, help_text, as_map.pos, action, metavar, env_name)
