"""The state the runtime's modules share, in one place.

The group flags and ``METRICS`` are attributes of the package itself (a call site reads
``otel.LAYER``: one attribute read while the group is off); ``NAMESPACE`` is the package's
namespace, written only by ``set_flag``. Everything else the runtime remembers is an attribute of
the one ``STATE`` object.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext, Tracer

    from ._config import Settings
    from ._spans import StartedSpan

    LifecycleEntry = tuple[Span, Token[Context]]  # a lifecycle span and its context token

LOG = logging.getLogger(__name__.rpartition(".")[0])
NAMESPACE: dict[str, Any] = vars(sys.modules[__name__.rpartition(".")[0]])
Recorder = Callable[[Any], Any]


class OpenSpans(threading.local):
    """Per thread: the spans it started and has not ended, outermost first. Every thread's stack
    is also in ``STACKS`` (by thread id), so that SIGTERM can end the spans of all threads."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[StartedSpan] = []
        STACKS[threading.get_ident()] = self.stack


STACKS: dict[int, list[StartedSpan]] = {}


@dataclass
class State:
    """Everything the runtime remembers besides the flags: one instance, ``STATE``."""

    # Per process: warnings given ((span or "", what)), open spans, exit hooks, instruments.
    warned: set[tuple[str, str]] = field(default_factory=set)
    open_spans: OpenSpans = field(default_factory=OpenSpans)
    hooks_installed: bool = False
    sigterm_installed: bool = False
    previous_sigterm: Any = None
    sigterm_timeout: float = 0.0
    flush_timeout: float = 5.0  # seconds for flush and shutdown at the end of a run, in all
    meters: dict[int, tuple[Any, dict[str, Recorder]]] = field(default_factory=dict)
    gauge_values: dict[str, Any] = field(default_factory=dict)
    # The current configuration: the tracer (None while no span records), the current meter's
    # recorders, the settings and resource attributes the worker bootstrap passes on.
    tracer: Tracer | None = None
    programmatic: bool = False  # enable() called by the program: configure() keeps its groups
    recorders: dict[str, Recorder] = field(default_factory=dict)
    settings: Settings | None = None
    resource: dict[str, Any] = field(default_factory=dict)
    # Per run: providers created (owned: shut down) or given (borrowed: flushed only), the open
    # lifecycle spans, training progress, first_time() keys. clear_run() resets what it names.
    owned: list[Any] = field(default_factory=list)
    borrowed: list[Any] = field(default_factory=list)
    shutdown_done: bool = False
    startup_done: bool = False
    startup: LifecycleEntry | None = None
    interval: LifecycleEntry | None = None
    link_to: SpanContext | None = None  # the span context the next interval links to
    save_interval: int | None = None
    interval_index: int = 0
    training: bool = False
    seen: set[str] = field(default_factory=set)
    # Many ranks (``_ranks``): the run id every rank agreed on, the tracer's id generator (None
    # when the tracer is not the SDK's), the trace root spans join now (startup, interval, after
    # training; 0 before configure), this rank's pipeline neighbours (None: no links).
    run_id: bytes = b""
    ids: Any = None
    trace_id: int = 0
    pipeline: Any = None

    def clear_run(self) -> None:
        """Forget the run's providers, first_time() keys and lifecycle progress (after shutdown)."""
        self.owned.clear()
        self.borrowed.clear()
        self.seen.clear()
        self.shutdown_done = self.startup_done = False
        self.link_to = self.save_interval = None
        self.interval_index = 0
        self.run_id, self.ids, self.trace_id, self.pipeline = b"", None, 0, None


STATE = State()


def flag(name: str) -> bool:
    """The current value of the package attribute ``name`` (a group flag or ``METRICS``)."""
    return bool(NAMESPACE.get(name, False))


def set_flag(name: str, value: bool) -> None:
    """Set the package attribute ``name`` (a group flag or ``METRICS``)."""
    NAMESPACE[name] = value


def warn_once(name: str, action: str) -> None:
    """Log, with the traceback, the first time ``action`` fails for span ``name`` (called in an
    ``except`` block)."""
    if (name, action) not in STATE.warned:
        STATE.warned.add((name, action))
        LOG.warning("telemetry: %s failed for span %r", action, name, exc_info=True)  # noqa: LOG014


def log_once(key: str, message: str, *args: object, exc_info: bool = False) -> None:
    """Log a warning the first time ``key`` is seen in this process."""
    if ("", key) not in STATE.warned:
        STATE.warned.add(("", key))
        LOG.warning("telemetry: " + message, *args, exc_info=exc_info)
