"""Render the few generated statements as source text formatted the way black formats them.

Megatron is formatted with black (line length 100, no string normalization). The generated lines
are simple calls, so black's choices reduce to: one line; the arguments on one indented line; one
argument per line with a magic trailing comma, exploding a dict literal that still does not fit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from codegen.resolve.walk import code_of
from codegen.runtime_calls import quote

LINE_LENGTH = 100


@dataclass(frozen=True)
class DictArg:
    """A ``{key: expr, ...}`` argument, or ``lambda: {...}`` when ``lazy``; keys are source code."""

    items: tuple[tuple[str, str], ...]
    lazy: bool = True
    keyword: str = ""

    @classmethod
    def of_strings(cls, items: Sequence[tuple[str, str]], lazy: bool = True) -> DictArg:
        return cls(tuple((quote(k), v) for k, v in items), lazy)

    def _opening(self) -> str:
        return (f"{self.keyword}=" if self.keyword else "") + ("lambda: {" if self.lazy else "{")

    def inline(self) -> str:
        return self._opening() + ", ".join(f"{k}: {v}" for k, v in self.items) + "}"

    def exploded(self, indent: str, step: str) -> list[str]:
        inner = indent + step
        lines = [self._opening()]
        for key, value in self.items:
            if len(f"{inner}{key}: {value},") <= LINE_LENGTH:
                lines.append(f"{inner}{key}: {value},")
            else:  # a long value in parentheses on its own line (black keeps these)
                lines += [f"{inner}{key}: (", f"{inner}{step}{value}", f"{inner}),"]
        return lines + [indent + "}"]


Arg = str | DictArg


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
            # black puts no magic trailing comma after a sole argument it explodes
            lines.append(exploded[-1] + ("," if len(args) > 1 else ""))
        elif len(f"{inner}{text},") > LINE_LENGTH and _STRING_ARG.fullmatch(text):
            lines.extend(_split_string(text, inner))
        else:
            lines.append(f"{inner}{text},")
    lines.append(f"{indent})")
    return "\n".join(lines)


_STRING_ARG = re.compile(r'(\w+=)?"([^"\\]*)"')


def _split_string(text: str, indent: str) -> list[str]:
    """A long string argument as implicitly concatenated pieces, one per line, split at spaces
    (black never splits strings itself, so Megatron's long help texts are written this way)."""
    match = _STRING_ARG.fullmatch(text)
    assert match is not None
    keyword, body = match.group(1) or "", match.group(2)
    lines: list[str] = []
    prefix = f"{indent}{keyword}"
    while body:
        room = LINE_LENGTH - len(prefix) - 3  # quotes and the trailing comma
        if len(body) <= room:
            piece, body = body, ""
        else:
            cut = body.rfind(" ", 0, room)
            cut = cut + 1 if cut > 0 else room
            piece, body = body[:cut], body[cut:]
        lines.append(f'{prefix}"{piece}"')
        prefix = indent
    lines[-1] += ","
    return lines


def _code(node: cst.CSTNode) -> str:
    return " ".join(code_of(node).split())


def _arg(arg: cst.Arg) -> Arg:
    value = arg.value
    keyword = arg.keyword.value if arg.keyword is not None else ""
    lazy = isinstance(value, cst.Lambda) and not value.params.params and isinstance(value.body, cst.Dict)
    body = value.body if lazy and isinstance(value, cst.Lambda) else value
    elements = (
        [e for e in body.elements if isinstance(e, cst.DictElement)] if isinstance(body, cst.Dict) else []
    )
    if isinstance(body, cst.Dict) and len(elements) == len(body.elements):
        items = tuple((_code(e.key), _code(e.value)) for e in elements)
        return DictArg(items, lazy, keyword)
    text = _code(value)
    return f"{keyword}={text}" if keyword else ("*" * len(arg.star) + text)


def expression_statement(code: str, indent: str, step: str = "    ", guard: str = "") -> str:
    """A call expression (optionally ``guard and call``) laid out by black's rules at ``indent``."""
    call = cst.parse_expression(code)
    assert isinstance(call, cst.Call)
    prefix = (f"{guard} and " if guard else "") + _code(call.func)
    return call_statement(prefix, [_arg(a) for a in call.args], indent, step)
