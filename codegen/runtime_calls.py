"""The runtime's call interface: the Python text of the calls into the runtime that the generator
writes into the target's code, in one place. ``spec/`` keeps what a hook inserts as typed payloads
(and imports nothing from here); ``resolve/`` recognises what was inserted and checks its
expressions, ``transforms/`` lays the same text out black-style, all with :func:`payload_call`
and :func:`hook_calls`.

Only text lives here, no layout (that is ``codegen/layout.py``, which also has :func:`quote`, the
one maker of string literals) and no parsing of specs; of the generator it imports only the spec
model and the layout module.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Protocol, assert_never

from codegen.layout import quote
from codegen.spec.model import (
    AddFlag,
    AroundHook,
    Call,
    EntryHook,
    Hook,
    Payload,
    Record,
    Stamp,
    StatementHook,
    WrapHook,
)


class Keyed(Protocol):
    """A spec's ``key: expression`` pair (spec.model.Attribute)."""

    @property
    def key(self) -> str: ...
    @property
    def expr(self) -> str: ...


class Option(Protocol):
    """A ``flags:`` option (spec.model.Flag)."""

    @property
    def option(self) -> str: ...
    @property
    def action(self) -> str | None: ...
    @property
    def metavar(self) -> str | None: ...
    @property
    def help(self) -> str: ...


# The local variable a span's start assigns: ``_otel_span``, ``_otel_span_2`` when nested.
SPAN_VARIABLE = "_otel_span"
SPAN_VARIABLE_PATTERN = re.compile(rf"{SPAN_VARIABLE}(_\d+)?\Z")


def span_variable(depth: int) -> str:
    return SPAN_VARIABLE if depth == 1 else f"{SPAN_VARIABLE}_{depth}"


def bind(code: str, alias: str, binding: str) -> str:
    """``code`` from a spec, with every name ``alias`` (the runtime, as specs write it) spelled
    ``binding`` (the private name the generated code imports the runtime as). Attribute names,
    keywords and string contents are left alone: only the names the expression reads change."""
    if alias not in code:
        return code
    try:
        tree = ast.parse(f"({code}\n)", mode="eval")  # parenthesized: any leading space or line break
    except SyntaxError:
        return code
    lines = code.split("\n")
    spots = sorted(
        ((n.lineno - 1, n.col_offset) for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == alias),
        reverse=True,
    )
    for row, col in spots:  # offsets are of UTF-8 bytes, the first line's after the "("
        col -= 1 if row == 0 else 0
        raw = lines[row].encode("utf-8")
        lines[row] = (raw[:col] + binding.encode("utf-8") + raw[col + len(alias.encode("utf-8")) :]).decode(
            "utf-8"
        )
    return "\n".join(lines)


def names_runtime(code: str | None, name: str) -> bool:
    """Whether the expression ``code`` names the runtime as ``name``."""
    return code is not None and any(
        isinstance(n, ast.Name) and n.id == name for n in ast.walk(ast.parse(code, mode="eval"))
    )


def guard(alias: str, flag: str | None) -> str:
    """``otel.METRICS``: the runtime flag a hook's call is conditional on ("" when none)."""
    return f"{alias}.{flag}" if flag else ""


def guarded(alias: str, flag: str | None, call: str) -> str:
    """The statement a guarded hook inserts, ``otel.METRICS and otel.record_metrics(...)``."""
    return f"{guard(alias, flag)} and {call}" if flag else call


def _lazy_dict(attributes: Sequence[Keyed]) -> str:
    return "lambda: {" + ", ".join(f"{quote(a.key)}: {a.expr}" for a in attributes) + "}"


def record_metrics_call(alias: str, metrics: Sequence[Keyed]) -> str:
    """A ``record:`` hook: ``otel.record_metrics(lambda: {"metric": value, ...})``."""
    return f"{alias}.record_metrics({_lazy_dict(metrics)})"


def set_current_attributes_call(alias: str, attributes: Sequence[Keyed]) -> str:
    """A ``stamp:`` hook: ``otel.set_current_attributes(lambda: {"key": value, ...})``."""
    return f"{alias}.set_current_attributes({_lazy_dict(attributes)})"


def add_argument_call(parser: str, flag: Option) -> str:
    """The ``flags:`` hook: ``parser.add_argument("--otel-x", ..., help="...")``."""
    args = [quote(flag.option)]
    if flag.action:
        args.append(f"action={quote(flag.action)}")
    else:
        args.append("default=None")
    if flag.metavar:
        args.append(f"metavar={quote(flag.metavar)}")
    args.append(f"help={quote(flag.help)}")
    return f"{parser}.add_argument({', '.join(args)})"


def payload_call(payload: Payload, alias: str, binding: str | None = None) -> str:
    """The call an entry/before/after hook inserts, as text (unguarded): as the spec would write it,
    or, given the ``binding`` the generated code imports the runtime as, as the code spells it."""
    match payload:
        case Call(text=text):
            code = text
        case Record(metrics=metrics):
            code = record_metrics_call(alias, metrics)
        case Stamp(attributes=attributes):
            code = set_current_attributes_call(alias, attributes)
        case AddFlag(parser=parser, flag=flag):
            code = add_argument_call(parser, flag)
        case _:
            assert_never(payload)
    return bind(code, alias, binding) if binding is not None else code


def payload_label(payload: Payload) -> str:
    """The spec key the payload is written under, for messages."""
    match payload:
        case Call() | AddFlag():
            return "call"
        case Record():
            return "record"
        case Stamp():
            return "stamp"
        case _:
            assert_never(payload)


def hook_calls(hook: Hook, alias: str, binding: str | None = None) -> tuple[str, ...]:
    """Every call a hook inserts as a statement of its own (unguarded): the payload's, or an around
    hook's ``enter`` and ``exit``; none for a wrap hook (it rewrites a call in place). With
    ``binding``: as the generated code spells them (see :func:`payload_call`)."""
    match hook:
        case EntryHook(payload=payload) | StatementHook(payload=payload):
            return (payload_call(payload, alias, binding),)
        case AroundHook(enter=enter, exit=exit_):
            return tuple(payload_call(c, alias, binding) for c in (enter, exit_) if c is not None)
        case WrapHook():
            return ()
        case _:
            assert_never(hook)


def hook_guard(hook: Hook) -> str | None:
    """The runtime flag a hook's statements are conditional on (None for a wrap hook)."""
    match hook:
        case EntryHook(guard=flag) | StatementHook(guard=flag) | AroundHook(guard=flag):
            return flag
        case WrapHook():
            return None
        case _:
            assert_never(hook)
