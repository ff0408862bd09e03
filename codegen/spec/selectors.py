"""Statement selectors and the regions they delimit (`around:`)."""

from __future__ import annotations

import ast
from typing import Literal

from codegen.spec import fields
from codegen.spec.fields import SELECTOR_MODIFIERS, keys
from codegen.spec.model import ANY, COMPOUND_KINDS, SELECTOR_KINDS, Region, Selector
from codegen.spec.reader import DOTTED, IDENTIFIER, Reader
from codegen.spec.yaml_nodes import YMap, YNode, YScalar, YSeq


def is_compound(selector: Selector) -> bool:
    """Whether the selector picks a compound statement (every alternative of an ``any`` does)."""
    if selector.kind == ANY:
        return all(is_compound(a) for a in selector.alternatives)
    return selector.kind in COMPOUND_KINDS


class SelectorReader(Reader):
    def _region(self, node: YNode, what: str = "around") -> Region | None:
        """``around:`` of a span or hook (``what``, the key, is always ``around``)."""
        as_map = self._map(node, what)
        if as_map is None:
            return None
        self._check_keys(as_map, keys(fields.REGION_FIELDS), what)
        present = set(as_map.entries)
        if "from" in present or "to" in present:
            if not {"from", "to"} <= present or present - {"from", "to"}:
                self.diags.error(as_map.pos, "a range takes exactly 'from' and 'to' selectors")
                return None
            first, last = self._selector(as_map.value("from")), self._selector(as_map.value("to"))
            return Region("range", as_map.pos, first, last) if first and last else None
        if "after" in present:
            if present != {"after"}:
                self.diags.error(as_map.pos, "'after' takes no other keys")
                return None
            first = self._selector(as_map.value("after"))
            return Region("after", as_map.pos, first) if first else None
        if "body" in present:
            if present - {"body", "branch"}:
                self.diags.error(as_map.pos, "'body' takes only 'branch'")
                return None
            branch = self._str(as_map.get("branch"), "branch") if "branch" in present else "body"
            if branch not in ("body", "else"):
                self.diags.error(as_map.value_pos("branch"), "branch must be 'body' or 'else'")
                return None
            first = self._selector(as_map.value("body"))
            if first is not None and not is_compound(first):
                self.diags.error(
                    first.pos, f"'body' needs a compound statement selector ({', '.join(COMPOUND_KINDS)})"
                )
                return None
            which: Literal["body", "else"] = "else" if branch == "else" else "body"  # checked above
            return Region("body", as_map.pos, first, branch=which) if first else None
        if "branch" in present:
            self.diags.error(as_map.key_pos("branch"), "'branch' is only valid with 'body'")
            return None
        first = self._selector(as_map)
        return Region("statement", as_map.pos, first) if first else None

    def _selector(self, node: YNode, what: str = "selector") -> Selector | None:
        """A statement selector (``what``: the key it is the value of; messages say "selector")."""
        del what
        as_map = self._map(node, "selector")
        if as_map is None:
            return None
        if ANY in as_map.entries:
            return self._any(as_map)
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
            self.diags.error(
                value_node.pos, f"call selector '{value}' must be a dotted name such as self._forward_mlp"
            )
            return None
        if kind == "assign" and not IDENTIFIER.match(value):
            self.diags.error(value_node.pos, f"assign selector '{value}' must be a plain variable name")
            return None
        if kind in COMPOUND_KINDS and kind != "try":
            header = f"{kind} {value}:\n    pass\n" if kind != "with" else f"with {value}:\n    pass\n"
            try:
                ast.parse(header)
            except SyntaxError:
                self.diags.error(
                    value_node.pos, f"'{kind}' selector header '{value}' does not parse as Python"
                )
                return None
        within = None
        if "within" in as_map.entries:
            within = self._selector(as_map.value("within"))
            if within is None:
                return None
            if not is_compound(within):
                self.diags.error(within.pos, "'within' needs a compound statement selector")
                return None
        occurrence = None
        if "occurrence" in as_map.entries:
            occ_node = as_map.get("occurrence")
            assert occ_node is not None
            if (
                not isinstance(occ_node, YScalar)
                or isinstance(occ_node.value, bool)
                or not isinstance(occ_node.value, int)
                or occ_node.value < 1
            ):
                self.diags.error(occ_node.pos, "occurrence must be a positive integer")
                return None
            occurrence = occ_node.value
        return Selector(kind, value, value_node.pos, within, occurrence)

    def _any(self, node: YMap) -> Selector | None:
        """``{any: [SELECTOR, ...]}``: alternatives tried in order, for code that differs between
        releases; each carries its own ``within`` / ``occurrence``."""
        if set(node.entries) != {ANY}:
            other = next(k for k in node.entries if k != ANY)
            self.diags.error(
                node.key_pos(other),
                f"'any' takes no other keys ('{other}'): put it on the alternatives that need it",
            )
            return None
        value = node.get(ANY)
        assert value is not None
        if not isinstance(value, YSeq):
            self.diags.error(value.pos, "'any' must be a list of selectors, tried in order")
            return None
        if len(value.items) < 2:
            self.diags.error(value.pos, "'any' needs at least two alternatives")
            return None
        alternatives = []
        for item in value.items:
            if isinstance(item, YMap) and ANY in item.entries:
                self.diags.error(
                    item.pos, "an alternative of 'any' cannot be 'any' itself: list them all in one"
                )
                return None
            alternative = self._selector(item)
            if alternative is None:
                return None
            alternatives.append(alternative)
        return Selector(ANY, "", node.pos, alternatives=tuple(alternatives))
