"""The layout of generated code, in one place: what the generator writes into a target's source
and its runtime package is laid out the way black lays it out (line length :data:`LINE_LENGTH`, no
string normalization), since Megatron is formatted with black.

The generated statements are simple, so black's choices reduce to a few rules, each written once:

- text: :func:`code_of` (a node's source), :func:`one_line` (the same with white space folded) and
  :func:`quote` (the one maker of string literals);
- calls: :func:`call_statement` (one line; the arguments hugged on one indented line; one argument
  per line with a magic trailing comma, exploding a dict that still does not fit and splitting a
  long string at spaces), :func:`guarded_assignment` (``x = a and b and f(...)`` with black's
  parenthesised fallback), :func:`expression_statement` and :func:`fit_call_line` (a call given as
  code), :func:`decorator`, :func:`statement` (laid-out text back to a node);
- re-indented statements: :func:`fit` (hugged arguments one per line once their line no longer
  fits);
- literals: :func:`literal` (constants, records and frozensets of the runtime's generated data).

A base module: it imports nothing of the generator, so every layer can use it.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import libcst as cst

LINE_LENGTH = 100

# Text

_EMPTY = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    """The source text of ``node`` as libcst renders it (default indentation and newlines)."""
    return _EMPTY.code_for_node(node)


def one_line(node: cst.CSTNode) -> str:
    """The code of ``node`` written on one line: the white space between its tokens (line breaks
    inside brackets included) folded to one space, the text of its strings kept as it is."""
    code = code_of(node)
    if "\n" not in code and "  " not in code and "\t" not in code and code == code.strip():
        return code
    return fold(code)


def fold(code: str) -> str:
    """``code`` (whole tokens) with the white space between its tokens folded to one space; what
    is inside a string, an f-string's replacement fields included, is copied as written."""
    offsets = [0]
    for line in code.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    parts: list[str] = []
    end: int | None = None
    depth = 0  # f-strings open (Python 3.12 tokenizes their inside)
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type in _NOT_CODE:
                continue
            start = offsets[token.start[0] - 1] + token.start[1]
            stop = offsets[token.end[0] - 1] + token.end[1]
            if end is not None and start != end:
                parts.append(code[end:start] if depth else " ")
            parts.append(code[start:stop])  # not token.string: 3.12 un-doubles an f-string's braces
            end = stop
            if token.type == _FSTRING_START:
                depth += 1
            elif token.type == _FSTRING_END:
                depth -= 1
    except (tokenize.TokenError, SyntaxError):  # not whole tokens: fold it all
        return " ".join(code.split())
    return "".join(parts)


_NOT_CODE = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER})
_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)  # Python 3.12+
_FSTRING_END = getattr(tokenize, "FSTRING_END", -1)


def quote(text: str) -> str:
    """A double-quoted Python string literal of ``text``: quotes, backslashes, newlines and every
    other non-printable character escaped, so that no text from a spec can end the literal or the
    line it is on."""
    return '"' + "".join(_ESCAPES.get(ch) or (ch if ch.isprintable() else _escape(ch)) for ch in text) + '"'


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def statement(text: str, indent: str) -> cst.BaseStatement:
    """The statement of laid-out ``text`` whose lines start with ``indent`` (libcst keeps the
    indentation of a statement in its block, so the text is dedented first)."""
    dedented = "\n".join(line.removeprefix(indent) for line in text.split("\n"))
    return cst.parse_statement(dedented + "\n")


# Calls


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
    whole = f"{indent}{prefix}({', '.join(flat)})"
    if len(whole) <= LINE_LENGTH:
        return whole
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


def guarded_assignment(
    target: str, guards: Sequence[str], call: str, args: Sequence[Arg], indent: str, step: str
) -> str:
    """``{target} = {guard} and ... and {call}({args})`` as black lays it out: the call split
    as :func:`call_statement` does while its opening fits, else black's fallback, the right-hand
    side in parentheses with one operand per line."""
    prefix = f"{target} = {' and '.join([*guards, call])}"
    if len(f"{indent}{prefix}(") <= LINE_LENGTH:
        return call_statement(prefix, args, indent, step)
    inner = indent + step
    lines = [f"{indent}{target} = (", f"{inner}{guards[0]}"] + [f"{inner}and {g}" for g in guards[1:]]
    lines.append(call_statement(f"and {call}", args, inner, step))
    lines.append(f"{indent})")
    return "\n".join(lines)


def argument(arg: cst.Arg) -> Arg:
    """A call's argument as :func:`call_statement` takes it (a dictionary as a :class:`DictArg`)."""
    value = arg.value
    keyword = arg.keyword.value if arg.keyword is not None else ""
    lazy = isinstance(value, cst.Lambda) and not value.params.params and isinstance(value.body, cst.Dict)
    body = value.body if lazy and isinstance(value, cst.Lambda) else value
    elements = (
        [e for e in body.elements if isinstance(e, cst.DictElement)] if isinstance(body, cst.Dict) else []
    )
    if isinstance(body, cst.Dict) and len(elements) == len(body.elements):
        items = tuple((one_line(e.key), one_line(e.value)) for e in elements)
        return DictArg(items, lazy, keyword)
    text = one_line(value)
    return f"{keyword}={text}" if keyword else ("*" * len(arg.star) + text)


def expression_statement(code: str, indent: str, step: str = "    ", guard: str = "") -> str:
    """A call expression (optionally ``guard and call``) laid out by black's rules at ``indent``."""
    call = cst.parse_expression(code)
    assert isinstance(call, cst.Call)
    prefix = (f"{guard} and " if guard else "") + one_line(call.func)
    return call_statement(prefix, [argument(a) for a in call.args], indent, step)


def decorator(prefix: str, args: Sequence[Arg], indent: str, step: str = "    ") -> cst.Decorator:
    """``@{prefix}({args})`` laid out by black's rules for a function defined at ``indent``."""
    laid_out = call_statement(f"@{prefix}", args, indent, step)
    function = statement(f"{laid_out}\n{indent}def _(): ...", indent)
    assert isinstance(function, cst.FunctionDef)
    return function.decorators[0]


def fit_call_line(stmt: cst.BaseStatement, indent: str, step: str) -> cst.BaseStatement:
    """A one-line call statement at ``indent`` laid out again by black's rules when it no longer
    fits (its comments kept); any other statement as it is."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return stmt
    expr = stmt.body[0]
    if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
        return stmt
    code = one_line(expr)
    if len(indent + code) <= LINE_LENGTH:
        return stmt
    laid_out = statement(expression_statement(code, indent, step), indent)
    return laid_out.with_changes(
        leading_lines=stmt.leading_lines, trailing_whitespace=stmt.trailing_whitespace
    )


# Re-indented statements


def fit(stmt: cst.BaseStatement, indent: str, origin: str) -> cst.BaseStatement:
    """``stmt`` moved from ``origin`` in to ``indent``: of its lines that fitted before and no
    longer do, the hugged argument lines of calls with several arguments go one per line (black's
    own next step)."""
    for _ in range(8):
        lines = code_of(stmt).splitlines()
        long = {
            line.strip()
            for line in lines
            if len(indent + line) > LINE_LENGTH and len(origin + line) <= LINE_LENGTH
        }
        if not long:
            return stmt
        target = next((c for c in _hugged_calls(stmt) if _args_text(c) in long), None)
        if target is None:
            return stmt
        stmt = stmt.visit(_Explode(target))  # type: ignore[assignment]  # libcst: visit() may return a sentinel
    return stmt


def _args_text(call: cst.Call) -> str:
    return code_of(call.with_changes(func=cst.Name("f"))).split("\n")[1].strip()


def _hugged_calls(stmt: cst.BaseStatement) -> list[cst.Call]:
    """Calls laid out as ``f(\n    a, b\n)``: arguments on one line of their own."""
    found: list[cst.Call] = []

    class _Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            opening = node.whitespace_before_args
            # black splits inside a sole argument instead (and a bare generator needs no comma)
            if len(node.args) < 2 or not isinstance(opening, cst.ParenthesizedWhitespace):
                return
            last = node.args[-1]
            inner = code_of(node.with_changes(func=cst.Name("f"))).split("\n")
            if len(inner) == 3 and isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
                found.append(node)

    stmt.visit(_Finder())
    return found


class _Explode(cst.CSTTransformer):
    def __init__(self, call: cst.Call) -> None:
        super().__init__()
        self.call = call

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if original_node is not self.call:
            return updated_node
        opening = updated_node.whitespace_before_args
        if isinstance(opening, cst.ParenthesizedWhitespace):  # a comment after "(" stays there only
            separator = opening.with_changes(first_line=cst.TrailingWhitespace())
        args = list(updated_node.args)
        closing = args[-1].whitespace_after_arg
        exploded = [
            a.with_changes(
                comma=cst.Comma(whitespace_after=separator), whitespace_after_arg=cst.SimpleWhitespace("")
            )
            for a in args[:-1]
        ]
        exploded.append(
            args[-1].with_changes(
                comma=cst.Comma(whitespace_after=closing), whitespace_after_arg=cst.SimpleWhitespace("")
            )
        )
        return updated_node.with_changes(args=exploded)


# Literals


class Frozen(tuple[str, ...]):
    """A frozenset literal whose members keep the order given (generated data is deterministic)."""


class Code(str):
    """Python source written as it is (``frozenset(GROUPS)``)."""


class Record(tuple[object, ...]):
    """A named record (a NamedTuple) written as a call: ``Span("layer", False)``."""

    name: str

    def __new__(cls, name: str, *fields: object) -> Self:
        record = super().__new__(cls, fields)
        record.name = name
        return record


def literal(value: object, indent: int = 4, suffix: str = ",", column: int | None = None) -> str:
    """``value`` as black writes it on a line indented by ``indent``, starting at ``column``
    (default: ``indent``) and followed by ``suffix``: on one line when it fits, else one element
    per line.

    Supports str, bool, int, float, None, tuples, lists and dicts of those, frozensets given
    as :class:`Frozen`, code as :class:`Code` and records as :class:`Record` (a call: its
    arguments on the next line when they fit there, as black writes a call).
    """
    flat = flat_literal(value)
    start = indent if column is None else column
    if start + len(flat) + len(suffix) <= LINE_LENGTH:
        return flat
    if not isinstance(value, (tuple, list, dict)) or not value:
        return flat
    inner = " " * (indent + 4)
    if isinstance(value, Record):
        arguments = ", ".join(flat_literal(v) for v in value)
        if len(inner) + len(arguments) <= LINE_LENGTH:
            return f"{value.name}(\n{inner}{arguments}\n{' ' * indent})"
        arguments = "".join(f"{inner}{literal(v, indent + 4, ',')},\n" for v in value)
        return f"{value.name}(\n{arguments}{' ' * indent})"
    if isinstance(value, Frozen):
        members = "".join(f"{inner}    {flat_literal(v)},\n" for v in value)
        return f"frozenset(\n{inner}{{\n{members}{inner}}}\n{' ' * indent})"
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            head = f"{flat_literal(key)}: "
            items.append(f"{inner}{head}{literal(item, indent + 4, ',', indent + 4 + len(head))},")
        opener, closer = "{", "}"
    else:
        items = [f"{inner}{literal(v, indent + 4, ',')}," for v in value]
        opener, closer = ("(", ")") if isinstance(value, tuple) else ("[", "]")
    return opener + "\n" + "\n".join(items) + "\n" + " " * indent + closer


def flat_literal(value: object) -> str:
    """``value`` (as :func:`literal` takes it) written on one line."""
    if isinstance(value, Code):
        return str(value)
    if isinstance(value, Record):
        return f"{value.name}({', '.join(flat_literal(v) for v in value)})"
    if isinstance(value, Frozen):
        return f"frozenset({{{', '.join(flat_literal(v) for v in value)}}})" if value else "frozenset()"
    if isinstance(value, str):
        return quote(value)
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, tuple):
        parts = [flat_literal(v) for v in value]
        return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
    if isinstance(value, list):
        return f"[{', '.join(flat_literal(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flat_literal(k)}: {flat_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {type(value).__name__} as a Python literal")
