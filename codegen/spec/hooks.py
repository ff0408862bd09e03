"""`hooks:` entries: calls into the runtime at entry, before/after/around statements, and call rewrites."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from codegen.diagnostics import Pos
from codegen.spec import fields
from codegen.spec.fields import HOOK_PLACEMENTS
from codegen.spec.model import (
    AroundHook,
    Call,
    EntryHook,
    Hook,
    Payload,
    Record,
    Stamp,
    StatementHook,
    WrapArgument,
    WrapHook,
    WrapResult,
)
from codegen.spec.reader import DOTTED
from codegen.spec.releases import ReleasesReader
from codegen.spec.selectors import SelectorReader
from codegen.spec.yaml_nodes import YMap, YNode


class HookReader(SelectorReader, ReleasesReader):
    hook_nodes: list[tuple[YMap, tuple[str, Pos] | None]]

    def _hooks(self, group_names: set[str], metric_names: set[str]) -> tuple[Hook, ...]:
        hooks = []
        for node, default_file in self.hook_nodes:
            hook = self._hook(node, default_file, group_names, metric_names)
            if hook is not None:
                hooks.append(hook)
        return tuple(hooks)

    def _hook(
        self, node: YMap, default_file: tuple[str, Pos] | None, group_names: set[str], metric_names: set[str]
    ) -> Hook | None:
        values = self._fields(node, fields.HOOK_FIELDS, "hook")
        file, file_pos = self._entry_file(node, default_file, "hook")
        if file is None:
            return None
        function = values.get("function")
        if function is None:
            return None
        placements = [k for k in HOOK_PLACEMENTS if k in node.entries]
        if len(placements) != 1:
            self.diags.error(node.pos, f"a hook needs exactly one of: {', '.join(HOOK_PLACEMENTS)}")
            return None
        kind = placements[0]
        shared = self._placement(node, values, file, file_pos, function)
        if kind == "wrap":
            return self._wrap_hook(node, shared)
        payloads = [k for k in ("call", "record", "stamp") if k in node.entries]
        ok, guard = self._guard(node, values, group_names)
        if not ok:
            return None
        if kind in ("around", "whole_function"):
            return self._around_hook(node, values, kind == "around", guard, payloads, shared)
        if len(payloads) != 1:
            self.diags.error(node.pos, "a hook needs exactly one of: call, record, stamp")
            return None
        payload, guard = self._payload(node, values, payloads[0], metric_names, guard)
        if payload is None or values[kind] is None:  # entry: not true; before/after: a bad selector
            return None
        if kind == "entry":
            return EntryHook(payload=payload, guard=guard, **shared)
        return StatementHook(
            selector=values[kind], after=kind == "after", payload=payload, guard=guard, **shared
        )

    def _guard(self, node: YMap, values: dict[str, Any], group_names: set[str]) -> tuple[bool, str | None]:
        """(valid, the runtime flag the hook's call is conditional on, if any)."""
        if "guard" not in values:
            return True, None
        guard_name = values["guard"]
        if guard_name is None:
            return False, None
        if guard_name not in group_names and guard_name != "metrics":
            self._unknown(
                node.value_pos("guard"), "guard", guard_name, sorted(group_names) + ["metrics"], "groups"
            )
            return False, None
        return True, guard_name.upper()

    def _around_hook(
        self,
        node: YMap,
        values: dict[str, Any],
        has_region: bool,
        guard: str | None,
        payloads: Sequence[str],
        shared: dict[str, Any],
    ) -> Hook | None:
        """``around:`` (a region) or ``whole_function:``: ``enter`` before, ``exit`` in a finally."""
        if payloads:
            self.diags.error(node.pos, "an around hook takes 'enter' and/or 'exit', not " + payloads[0])
            return None
        enter, exit_ = values.get("enter"), values.get("exit")
        if ("enter" in values and enter is None) or ("exit" in values and exit_ is None):
            return None
        if enter is None and exit_ is None:
            self.diags.error(node.pos, "an around hook needs 'enter' or 'exit'")
            return None
        region = values["around"] if has_region else None
        if has_region and region is None:
            return None
        return AroundHook(region=region, enter=enter, exit=exit_, guard=guard, **shared)

    def _payload(
        self, node: YMap, values: dict[str, Any], payload: str, metric_names: set[str], guard: str | None
    ) -> tuple[Payload | None, str | None]:
        """What a ``call:``, ``record:`` or ``stamp:`` hook inserts (None if invalid), and its
        guard (a ``record:`` hook is guarded by METRICS unless it names another)."""
        if payload == "call":
            return values["call"], guard
        attrs = values[payload]
        if attrs is None:
            return None, guard
        where = node.value_pos(payload)
        if payload == "record":
            for attr in attrs:
                if attr.key not in metric_names:
                    self._unknown(attr.pos, "metric", attr.key, sorted(metric_names), "metrics")
                    return None, guard
            return Record(tuple(attrs), where), guard or "METRICS"
        return Stamp(tuple(attrs), where), guard

    def _wrap_hook(self, node: YMap, shared: dict[str, Any]) -> Hook | None:
        spec = self._map(node.value("wrap"), "wrap")
        if spec is None:
            return None
        values = self._fields(spec, fields.WRAP_FIELDS, "wrap")
        if "call" not in spec.entries:  # reported by _fields
            return None
        # call, within and occurrence are a call selector
        selector = self._selector(
            YMap({k: v for k, v in spec.entries.items() if k in ("call", "within", "occurrence")}, spec.pos)
        )
        wrapper = values.get("with")
        if wrapper is not None and not DOTTED.match(wrapper):
            self.diags.error(
                spec.value_pos("with"), "'with' must be a dotted callable such as otel.in_context"
            )
            return None
        target: WrapArgument | WrapResult | None = None
        if ("argument" in spec.entries) == ("result" in spec.entries):
            self.diags.error(
                spec.pos, "wrap takes either 'argument' (an index) or 'result' (an attribute key)"
            )
            return None
        if "argument" in values:
            value = values["argument"]
            if value is None:
                return None
            target = WrapArgument(value)
        else:
            key = values["result"]
            target = WrapResult(key) if key is not None else None
        if selector is None or wrapper is None or target is None:
            return None
        if selector.kind != "call":
            self.diags.error(spec.pos, "wrap needs a 'call' selector")
            return None
        return WrapHook(
            selector=selector, wrapper=wrapper, target=target, wrapper_pos=node.value_pos("wrap"), **shared
        )

    def _placement(
        self, node: YMap, values: dict[str, Any], file: str, file_pos: Pos | None, function: str
    ) -> dict[str, Any]:
        """The keyword arguments every hook shares: where it is declared, its file, function,
        note and releases."""
        return {
            "file": file,
            "function": function,
            "pos": node.pos,
            "note": values.get("note") or "",
            "file_pos": file_pos,
            "function_pos": node.value_pos("function"),
            "releases": values.get("releases"),
        }

    def _call(self, node: YNode | None, what: str) -> Call | None:
        text = self._str(node, what)
        if text is None or node is None:
            return None
        try:
            expr = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as exc:
            self.diags.error(node.pos, f"{what}: '{text}' does not parse: {exc.msg}")
            return None
        if not isinstance(expr, ast.Call):
            self.diags.error(node.pos, f"{what}: '{text}' must be a call")
            return None
        return Call(text, node.pos)
