"""`attributes:` (telemetry.yaml): the type and description of each span attribute key, and the
types that need no declaration because the expression shows them (a literal, ``len(...)``, ...).

Used by the semantic-convention registry export (``generated/registry/``) and by ``codegen
verify``, which checks captured values against these types.
"""

from __future__ import annotations

import ast

from codegen.spec import fields
from codegen.spec.model import AttributeDecl
from codegen.spec.reader import SPAN_NAME, Reader
from codegen.spec.vocabulary import ATTRIBUTE_TYPES

_CALL_TYPES = {"len": "int", "int": "int", "round": "int", "float": "double", "str": "string",
               "repr": "string", "bool": "boolean", "isinstance": "boolean"}  # fmt: skip


def infer_type(expr: str) -> str | None:
    """The attribute type an expression evidently has, or None when only a declaration can say."""
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Constant) and not isinstance(node.value, bytes) and node.value is not None:
        return {bool: "boolean", int: "int", float: "double", str: "string"}.get(type(node.value))
    if isinstance(node, ast.JoinedStr):
        return "string"
    if isinstance(node, ast.Compare) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return "boolean"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _CALL_TYPES.get(node.func.id)
    return None


class AttributeReader(Reader):
    def _attribute_decls(self) -> tuple[AttributeDecl, ...]:
        node = self._singleton_map("attributes")
        if node is None:
            return ()
        out = []
        for key, (key_pos, value) in node.entries.items():
            if not SPAN_NAME.match(key):
                self.diags.error(key_pos, f"attribute key '{key}' must be dotted identifiers")
                continue
            as_map = self._map(value, f"attribute '{key}'")
            if as_map is None:
                continue
            values = self._fields(as_map, fields.ATTRIBUTE_FIELDS, f"attribute '{key}'")
            kind = values.get("type")
            if kind is not None and kind not in ATTRIBUTE_TYPES:
                self._unknown(as_map.value_pos("type"), "attribute type", kind, list(ATTRIBUTE_TYPES))
                continue
            brief, note = values.get("brief") or "", values.get("note") or ""
            compat = values.get("compat") or ""
            out.append(AttributeDecl(key, kind, brief, key_pos, note, compat))
        return tuple(out)
