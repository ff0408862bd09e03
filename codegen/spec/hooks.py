"""`hooks:` entries: calls into the runtime at entry, before/after/around statements, and call rewrites."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any, Literal

from codegen.diagnostics import Pos
from codegen.runtime_calls import record_metrics_call, set_current_attributes_call
from codegen.spec.model import (
    Hook,
)
from codegen.spec.reader import DOTTED, IDENTIFIER
from codegen.spec.releases import ReleasesReader
from codegen.spec.selectors import SelectorReader
from codegen.spec.yaml_nodes import YMap, YNode, YScalar

HOOK_KEYS = (
    "file",
    "function",
    "entry",
    "before",
    "after",
    "around",
    "whole_function",
    "call",
    "enter",
    "exit",
    "guard",
    "record",
    "stamp",
    "note",
    "wrap",
    "releases",
)
WRAP_KEYS = ("call", "within", "occurrence", "argument", "result", "with")


class HookReader(SelectorReader, ReleasesReader):
    hook_nodes: list[tuple[YMap, tuple[str, Pos] | None]]

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
        file, file_pos = self._entry_file(node, default_file, "hook")
        if file is None:
            return None
        function = self._required_str(node, "function", "hook")
        if function is None:
            return None
        placements = [
            k for k in ("entry", "before", "after", "around", "whole_function", "wrap") if k in node.entries
        ]
        if len(placements) != 1:
            self.diags.error(
                node.pos, "a hook needs exactly one of: entry, before, after, around, whole_function, wrap"
            )
            return None
        kind = placements[0]
        if kind == "wrap":
            return self._wrap_hook(node, file, file_pos, function)
        payloads = [k for k in ("call", "record", "stamp") if k in node.entries]
        ok, guard = self._guard(node, group_names)
        if not ok:
            return None
        if kind in ("around", "whole_function"):
            return self._around_hook(node, kind == "around", file, file_pos, function, guard, payloads)
        if len(payloads) != 1:
            self.diags.error(node.pos, "a hook needs exactly one of: call, record, stamp")
            return None
        call, guard = self._payload_call(node, payloads[0], metric_names, alias, guard)
        if call is None:
            return None
        selector = None
        if kind in ("before", "after"):
            selector = self._selector(node.value(kind))
            if selector is None:
                return None
        elif not (isinstance(entry := node.get("entry"), YScalar) and entry.value is True):
            self.diags.error(node.value_pos("entry"), "entry must be true")
            return None
        point: Literal["entry", "before", "after"] = (
            "before" if kind == "before" else "after" if kind == "after" else "entry"
        )
        return Hook(
            file,
            function,
            point,
            node.pos,
            selector=selector,
            call=call,
            guard=guard,
            **self._placement(node, file_pos),
        )

    def _guard(self, node: YMap, group_names: set[str]) -> tuple[bool, str | None]:
        """(valid, the runtime flag the hook's call is conditional on, if any)."""
        if "guard" not in node.entries:
            return True, None
        guard_name = self._str(node.get("guard"), "guard")
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
        has_region: bool,
        file: str,
        file_pos: Pos | None,
        function: str,
        guard: str | None,
        payloads: Sequence[str],
    ) -> Hook | None:
        """``around:`` (a region) or ``whole_function:``: ``enter`` before, ``exit`` in a finally."""
        if payloads:
            self.diags.error(node.pos, "an around hook takes 'enter' and/or 'exit', not " + payloads[0])
            return None
        enter = self._call(node.get("enter"), "enter") if "enter" in node.entries else None
        exit_ = self._call(node.get("exit"), "exit") if "exit" in node.entries else None
        if enter is None and exit_ is None:
            self.diags.error(node.pos, "an around hook needs 'enter' or 'exit'")
            return None
        region = None
        if has_region:
            region = self._region(node.value("around"))
            if region is None:
                return None
        return Hook(
            file,
            function,
            "around",
            node.pos,
            region=region,
            enter=enter,
            exit=exit_,
            guard=guard,
            **self._placement(node, file_pos),
        )

    def _payload_call(
        self, node: YMap, payload: str, metric_names: set[str], alias: str, guard: str | None
    ) -> tuple[str | None, str | None]:
        """The call a ``call:``, ``record:`` or ``stamp:`` hook inserts (None if invalid), and its
        guard (a ``record:`` hook is guarded by METRICS unless it names another)."""
        if payload == "call":
            return self._call(node.get("call"), "call"), guard
        attrs = self._attributes(node.get(payload), payload)
        if attrs is None:
            return None, guard
        if payload == "record":
            for attr in attrs:
                if attr.key not in metric_names:
                    self._unknown(attr.pos, "metric", attr.key, sorted(metric_names), "metrics")
                    return None, guard
            return record_metrics_call(alias, attrs), guard or "METRICS"
        return set_current_attributes_call(alias, attrs), guard

    def _wrap_hook(self, node: YMap, file: str, file_pos: Pos | None, function: str) -> Hook | None:
        spec = self._map(node.value("wrap"), "wrap")
        if spec is None:
            return None
        self._check_keys(spec, WRAP_KEYS, "wrap")
        selector = self._selector(
            YMap({k: v for k, v in spec.entries.items() if k in ("call", "within", "occurrence")}, spec.pos)
        )
        wrapper = self._required_str(spec, "with", "wrap")
        if wrapper is not None and not DOTTED.match(wrapper):
            self.diags.error(
                spec.value_pos("with"), "'with' must be a dotted callable such as otel.in_context"
            )
            return None
        argument = result = None
        if ("argument" in spec.entries) == ("result" in spec.entries):
            self.diags.error(
                spec.pos, "wrap takes either 'argument' (an index) or 'result' (an attribute key)"
            )
            return None
        if "argument" in spec.entries:
            arg_node = spec.get("argument")
            value = arg_node.value if isinstance(arg_node, YScalar) else None
            valid = (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
                isinstance(value, str) and IDENTIFIER.match(value)
            )
            if not valid:
                self.diags.error(
                    spec.value_pos("argument"), "argument must be a position (0, 1, ...) or a keyword name"
                )
                return None
            assert isinstance(value, (int, str))  # checked just above
            argument = value
        else:
            result = self._str(spec.get("result"), "result")
        if selector is None or wrapper is None or (argument is None and result is None):
            return None
        if selector.kind != "call":
            self.diags.error(spec.pos, "wrap needs a 'call' selector")
            return None
        return Hook(
            file,
            function,
            "wrap",
            node.pos,
            selector=selector,
            wrapper=wrapper,
            argument=argument,
            result=result,
            **self._placement(node, file_pos),
        )

    def _placement(self, node: YMap, file_pos: Pos | None) -> dict[str, Any]:
        """The keyword arguments every hook shares: its note and where it names file, function and
        the expressions it inserts."""
        payload = next((node.get(k) for k in ("call", "record", "stamp", "wrap") if k in node.entries), None)
        return {
            "note": (self._str(node.get("note"), "note") or "") if "note" in node.entries else "",
            "file_pos": file_pos,
            "function_pos": node.value_pos("function"),
            "releases": self._releases(node),
            "call_pos": payload.pos if payload is not None else None,
            "enter_pos": node.value_pos("enter") if "enter" in node.entries else None,
            "exit_pos": node.value_pos("exit") if "exit" in node.entries else None,
        }

    def _call(self, node: YNode | None, what: str) -> str | None:
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
        return text
