"""The record types of the taxonomy's entries (``_taxonomy`` holds the values).

Named tuples: read by field name; cheap to import (``typing`` only). The taxonomy's constants:
``FORMAT`` its layout (``_version.TAXONOMY_FORMATS``); ``CHOICES`` the valid values most variables
share; ``FLAGS`` span group -> its flag, in declaration order; ``GROUPS`` the groups in that order;
``PRESETS`` preset -> the groups it enables, nested presets expanded; ``DEFAULT_SPEC`` what
``enable()`` records when given nothing; ``SPANS`` span name -> its group and goodput; ``ENV`` what
each variable means -> its name, default and valid values (() when open); ``ENV_TIMESTAMPS``
variables giving a startup timestamp (epoch seconds) -> the timestamp key; ``FLAG_OVERRIDES``
flags overriding a variable; ``STARTUP`` the startup span; ``INTERVAL`` the training interval span,
one root per save_interval iterations; ``PHASES`` backdated children of the startup span, in
order; ``PRE_STARTUP`` backdated roots before it; ``INSTRUMENTS`` metric name -> its instrument.
"""

from __future__ import annotations

from typing import NamedTuple


class Span(NamedTuple):
    """A span name's group and whether it counts towards goodput."""

    group: str
    goodput: bool


class EnvVar(NamedTuple):
    """A configuration variable: its name, default, and valid values (() when open)."""

    name: str
    default: str
    choices: tuple[str, ...]


class FlagOverride(NamedTuple):
    """A command-line flag that overrides a variable."""

    dest: str  # the args attribute
    env: str  # the variable
    option: str  # the option as written on the command line
    switch: bool  # a store_true flag


class Startup(NamedTuple):
    """The startup span."""

    name: str
    flag: str  # its group's flag
    start: str  # the timestamp key of program start


class Interval(NamedTuple):
    """The training interval span, one root per save_interval iterations."""

    name: str
    flag: str  # its group's flag


class Backdated(NamedTuple):
    """A backdated span between two startup timestamps."""

    name: str
    flag: str  # its group's flag
    start: str  # the timestamp keys of its start and end
    end: str


class Instrument(NamedTuple):
    """A metric instrument."""

    kind: str  # histogram, gauge or counter
    unit: str
    description: str
