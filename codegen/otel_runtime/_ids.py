"""Trace and span ids: a per-process generator seeded from ``os.urandom``, reseeded after fork.

The SDK's default generator draws from the ``random`` module, which Megatron seeds with ``--seed``:
two jobs with the same seed would emit the same ids. Reading ``os.urandom`` for every id escapes
that but costs a system call per span (about 5 us where it was measured). Here a private
``random.Random`` is seeded once from ``os.urandom`` at import and again in a forked child (so a
DataLoader worker never repeats its parent's ids): one C call per id, never touched by
``random.seed``. Ids are uniformly random (the W3C random-trace-id flag holds) and never zero.
The export thread draws a batch's span ids at once, from one read of ``os.urandom`` per batch
(``span_ids``).
"""

from __future__ import annotations

import itertools
import os
import random
import struct
from collections.abc import Callable
from typing import Any

_RANDOM = random.Random(os.urandom(32))
_bits = _RANDOM.getrandbits
# The generator's bits, for a caller drawing ids itself (``_otlp.SpanEncoder._lean``): zero is
# not an id (``span_id`` draws again).
bits = _bits
_GENERATOR: Any = None


def _reseed() -> None:
    """A fresh seed from the operating system (at import and in a forked child)."""
    try:
        _RANDOM.seed(os.urandom(32))
    except Exception:  # never fail a fork
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)


def span_id() -> int:
    """A random, nonzero 64-bit span id."""
    value = _bits(64)
    while not value:
        value = _bits(64)
    return value


def span_ids(count: int) -> Callable[[], int]:
    """A function giving ``count`` random span ids drawn at once (one read of ``os.urandom``,
    one ``struct.unpack``: about a fifth of the instructions of a ``getrandbits`` call per id),
    then 0; a caller draws again on 0 (``span_id``), as on an id that is 0 itself. For the export
    thread, which draws the ids of a whole batch (``_otlp.SpanEncoder.encode``)."""
    try:
        values: tuple[int, ...] = struct.unpack(f"<{count}Q", os.urandom(8 * count))
    except Exception:  # no randomness from the system now: one at a time (span_id)
        values = ()
    return itertools.chain(values, itertools.repeat(0)).__next__


def trace_id() -> int:
    """A random, nonzero 128-bit trace id."""
    value = _bits(128)
    while not value:
        value = _bits(128)
    return value


def generator() -> Any:
    """The SDK ``IdGenerator`` drawing from ``span_id`` and ``trace_id`` (one per process)."""
    global _GENERATOR
    if _GENERATOR is None:
        from opentelemetry.sdk.trace.id_generator import IdGenerator

        class ProcessIds(IdGenerator):
            """Ids from the runtime's per-process generator (``_ids``)."""

            def generate_span_id(self) -> int:
                return span_id()

            def generate_trace_id(self) -> int:
                return trace_id()

            def is_trace_id_random(self) -> bool:
                """Trace ids are random (W3C Trace Context level 2); older SDKs lack the method."""
                return True

        _GENERATOR = ProcessIds()
    return _GENERATOR
