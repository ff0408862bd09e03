"""Render the few generated statements as source text formatted the way black formats them.

Megatron is formatted with black (line length 100, no string normalization). The generated lines
are simple calls, so black's choices reduce to: one line; the arguments on one indented line; one
argument per line with a magic trailing comma, exploding a dict literal that still does not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

LINE_LENGTH = 100


@dataclass(frozen=True)
class DictArg:
    """A ``lambda: {key: expr, ...}`` argument."""

    items: tuple[tuple[str, str], ...]

    def inline(self) -> str:
        return "lambda: {" + ", ".join(f"{_quote(k)}: {v}" for k, v in self.items) + "}"

    def exploded(self, indent: str, step: str) -> list[str]:
        inner = indent + step
        return ["lambda: {"] + [f"{inner}{_quote(k)}: {v}," for k, v in self.items] + [indent + "}"]


Arg = str | DictArg


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def string_literal(text: str) -> str:
    return _quote(text)


def call_statement(prefix: str, args: Sequence[Arg], indent: str, step: str = "    ") -> str:
    """``{prefix}({args})`` as black would lay it out at ``indent``; no trailing newline."""
    flat = [a.inline() if isinstance(a, DictArg) else a for a in args]
    one_line = f"{indent}{prefix}({', '.join(flat)})"
    if len(one_line) <= LINE_LENGTH:
        return one_line
    inner = indent + step
    hugged = f"{inner}{', '.join(flat)}"
    if len(hugged) <= LINE_LENGTH:
        return f"{indent}{prefix}(\n{hugged}\n{indent})"
    lines = [f"{indent}{prefix}("]
    for arg, text in zip(args, flat):
        if isinstance(arg, DictArg) and len(f"{inner}{text},") > LINE_LENGTH:
            exploded = arg.exploded(inner, step)
            lines.append(inner + exploded[0])
            lines.extend(exploded[1:-1])
            lines.append(exploded[-1] + ",")
        else:
            lines.append(f"{inner}{text},")
    lines.append(f"{indent})")
    return "\n".join(lines)
