"""Typed access to located YAML nodes: every wrong type or unknown key becomes a diagnostic."""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from codegen.diagnostics import Diagnostics, Pos
from codegen.spec.fields import Field, Table, keys
from codegen.spec.model import Attribute
from codegen.spec.yaml_nodes import YMap, YNode, YScalar, YSeq

SPAN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
GROUP_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_WHERE = {
    "group": ": declare groups in telemetry.yaml",
    "group or preset": ": declare groups in telemetry.yaml",
    "guard": ": declare groups in telemetry.yaml",
    "metric": ": declare metrics in telemetry.yaml",
    "environment variable": ": declare env in telemetry.yaml",
    "parent span": "",
}


class Reader:
    """Reports problems into ``diags`` and returns None instead of raising."""

    singletons: dict[str, tuple[str, YNode]]  # top-level key -> (its spec file, its value)

    def __init__(self, diags: Diagnostics) -> None:
        self.diags = diags
        # Kinds of names ("groups", "metrics", "env", "spans", ...) whose declarations may sit in a
        # spec file that failed to load: a reference to an unknown one is a follow-on error of
        # that file's, not reported until it loads.
        self.incomplete: frozenset[str] = frozenset()

    def _entry_file(
        self, node: YMap, default_file: tuple[str, Pos] | None, what: str
    ) -> tuple[str | None, Pos | None]:
        """The file a span or hook names (its own ``file:`` or the spec file's), validated."""
        file: str | None
        pos: Pos | None
        if "file" in node.entries:
            file, pos = self._str(node.get("file"), "file"), node.value_pos("file")
        else:
            file, pos = default_file if default_file else (None, None)
        if file is None:
            if "file" not in node.entries:
                self.diags.error(
                    node.pos, f"{what} has no 'file' (set it on the {what} or at the top of the spec file)"
                )
            return None, None
        if file.startswith("/") or ".." in PurePosixPath(file).parts or not file.endswith(".py"):
            self.diags.error(
                pos or node.pos, f"file '{file}' must be a relative path to a .py file inside the source root"
            )
            return None, None
        return file, pos

    def _check_keys(self, node: YMap, allowed: tuple[str, ...], what: str) -> None:
        for key in node.entries:
            if key not in allowed:
                self._unknown(node.key_pos(key), f"key in {what}", key, list(allowed))

    def _unknown(
        self, pos: Pos, what: str, name: str, valid: list[str], declared_in: str | None = None
    ) -> None:
        """Report an unknown name with the close matches and the valid ones; nothing when the
        names of its kind (``declared_in``) are incomplete because a spec file failed to load."""
        if declared_in is not None and declared_in in self.incomplete:
            return
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        listed = f"valid: {', '.join(valid)}" if valid else f"none declared{_WHERE.get(what, '')}"
        self.diags.error(pos, f"unknown {what} '{name}'{hint} ({listed})")

    def _typed(
        self, node: YNode | None, what: str, check: Callable[[object], bool], expected: str
    ) -> object | None:
        if node is None:
            return None
        if isinstance(node, YScalar) and check(node.value):
            return node.value
        found = (
            "a mapping"
            if isinstance(node, YMap)
            else "a list"
            if isinstance(node, YSeq)
            else type(node.value).__name__
        )
        self.diags.error(node.pos, f"{what} must be {expected}, not {found}")
        return None

    def _fields(
        self, node: YMap, table: Table, what: str, variant: str | None = None, keys_of: str | None = None
    ) -> dict[str, Any]:
        """Read ``node`` as an object of ``table``: each key not in the table and each key the
        table requires (of ``variant``, e.g. a lifecycle role) that is absent is reported, and each
        present key with a converter is read by it. Returns key -> converted value (None when
        invalid, reported at the value) for those keys; keys without a converter are the
        caller's to read. ``keys_of`` names the object in the unknown-key message when it is
        not ``what``."""
        self._check_keys(node, keys(table), keys_of or what)
        values: dict[str, Any] = {}
        for field in table:
            if field.key not in node.entries:
                if field.required or (variant is not None and variant in field.required_for):
                    self.diags.error(node.pos, f"{what} is missing '{field.key}'{field.missing}")
                continue
            if field.convert:
                values[field.key] = self._read(node, field, None)
        return values

    def _read(self, node: YMap, field: Field, absent: Any) -> Any:
        """The value of ``field`` in ``node`` converted by its table's reader method (None and
        a diagnostic when invalid), or ``absent`` when the key is not there."""
        if field.key not in node.entries:
            return absent
        convert: Callable[[YNode | None, str], Any] = getattr(self, field.convert)
        return convert(node.get(field.key), field.key)

    def _str(self, node: YNode | None, what: str) -> str | None:
        value = self._typed(node, what, lambda v: isinstance(v, str), "a string")
        return value if isinstance(value, str) else None

    def _bool(self, node: YNode | None, what: str) -> bool | None:
        value = self._typed(node, what, lambda v: isinstance(v, bool), "true or false")
        return value if isinstance(value, bool) else None

    def _true(self, node: YNode | None, what: str) -> bool | None:
        if isinstance(node, YScalar) and node.value is True:
            return True
        if node is not None:
            self.diags.error(node.pos, f"{what} must be true")
        return None

    def _argument(self, node: YNode | None, what: str) -> int | str | None:
        """A call's argument: a position (0, 1, ...) or a keyword name."""
        value = node.value if isinstance(node, YScalar) else None
        if (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
            isinstance(value, str) and IDENTIFIER.match(value)
        ):
            return value
        if node is not None:
            self.diags.error(node.pos, f"{what} must be a position (0, 1, ...) or a keyword name")
        return None

    def _choices(self, node: YNode | None, what: str) -> tuple[str, ...]:
        """A list of strings (each reported as a "choice" when it is not one)."""
        if node is None:
            return ()
        return tuple(c for c in (self._str(n, "choice") for n in self._seq(node, what)) if c)

    def _labels(self, node: YNode | None, what: str) -> tuple[tuple[str, str], ...]:
        """Fixed attributes: dotted key -> string (the valid ones; the others are reported)."""
        as_map = self._map(node, what) if node is not None else None
        labels: list[tuple[str, str]] = []
        for key, (key_pos, value) in as_map.entries.items() if as_map else ():
            text = self._str(value, f"attribute '{key}'")
            if not SPAN_NAME.match(key):
                self.diags.error(key_pos, f"attribute key '{key}' must be dotted identifiers")
            elif text is not None:
                labels.append((key, text))
        return tuple(labels)

    def _str_or_int(self, node: YNode | None, what: str) -> str | None:
        """A string, or an integer as its text."""
        if node is None:
            return None
        if (
            isinstance(node, YScalar)
            and isinstance(node.value, (str, int))
            and not isinstance(node.value, bool)
        ):
            return str(node.value)
        self.diags.error(node.pos, f"{what} must be a string or an integer")
        return None

    def _singleton_map(self, key: str) -> YMap | None:
        """The mapping of the top-level ``key``: None when no file declares it (or not as one)."""
        entry = self.singletons.get(key)
        return None if entry is None else self._map(entry[1], key)

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

    def _names(self, node: YNode, what: str) -> tuple[str, ...]:
        return tuple(n for n in (self._str(item, what) for item in self._seq(node, what)) if n)

    def _expression(self, node: YNode | None, what: str) -> str | None:
        text = self._str(node, what)
        if text is None or node is None:
            return None
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            self.diags.error(node.pos, f"{what}: '{text}' does not parse: {exc.msg}")
            return None
        suspends = _suspends(tree)
        if suspends:
            self.diags.error(node.pos, f"{what}: '{text}' {suspends}")
            return None
        return " ".join(text.split())

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
            expr = (
                self._str(value, f"attribute '{key}'")
                if not isinstance(value, YScalar) or isinstance(value.value, str)
                else repr(value.value)
            )
            if expr is None:
                ok = False
                continue
            try:
                tree = ast.parse(expr.strip(), mode="eval")
            except SyntaxError as exc:
                self.diags.error(
                    value.pos, f"attribute '{key}': expression '{expr}' does not parse: {exc.msg}"
                )
                ok = False
                continue
            suspends = _suspends(tree)
            if suspends:
                self.diags.error(value.pos, f"attribute '{key}': expression '{expr}' {suspends}")
                ok = False
                continue
            attributes.append(Attribute(key, expr, value.pos))
        return tuple(attributes) if ok else None


def _suspends(tree: ast.AST) -> str:
    """Why a spec expression cannot be placed: it awaits or yields (the generated code evaluates
    attributes in a lambda, where neither is valid, and ``when``/``name_expr`` in the span's
    start, which must not suspend the function); "" when it does neither."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Await):
            return (
                "awaits: spec expressions are evaluated where a coroutine cannot suspend; "
                "await it in the code and name the result"
            )
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return "yields: spec expressions are evaluated where the function cannot yield"
    return ""
