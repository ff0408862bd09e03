"""The runtime's call interface: the Python text of the calls into the runtime that the generator
writes into the target's code, in one place. ``spec/`` builds hook calls with it, ``resolve/``
recognises what was inserted by it, ``transforms/`` lays the same text out black-style.

Only text lives here, no layout (that is ``codegen/layout.py``, which also has :func:`quote`, the
one maker of string literals) and no parsing of specs; it imports nothing of the generator but
the layout module (``spec/`` sits above it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from codegen.layout import quote


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
