"""The state the runtime's modules share, by lifetime.

- ``PROCESS`` (a ``Process``, never replaced): what outlives a run: the exit hooks and SIGTERM
  handler installed, the previous SIGTERM handler, the fork handler's registration, the warnings
  given once, the metric instruments made per meter, the batch processor class.
- ``PROCESS.run`` (a ``Run``): everything one run records with: its tracer, providers, settings,
  open spans, lifecycle spans and training progress. It is never reset field by field:
  ``configure()`` and ``reset()`` put a fresh ``Run()`` in its place, ``shutdown()`` and a fork (in
  the child) an ended one (``new_run``). Read it as ``PROCESS.run`` when used, never keep it.

The group flags and ``METRICS`` are attributes of the package itself (a call site reads
``otel.LAYER``: one attribute read while the group is off): the published form of the run's
groups, written only through ``set_flag`` and all cleared when the run is replaced. So is
``start_span`` while a run records on the lean path (``PUBLISHED``).
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._taxonomy import FLAGS

if TYPE_CHECKING:
    from contextvars import Token
    from typing import TypeAlias

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext, Tracer

    from ._config import Settings
    from ._lean_span import LeanSpan
    from ._spans import StartedSpan

    Opened: TypeAlias = StartedSpan | LeanSpan  # a span start_span started, open until it ends

    LifecycleEntry = tuple[Span, Token[Context]]  # a lifecycle span and its context token

LOG = logging.getLogger(__name__.rpartition(".")[0])
NAMESPACE: dict[str, Any] = vars(sys.modules[__name__.rpartition(".")[0]])
# Package functions a run may replace with its own (``start_span``: the lean tracer's ``open``):
# what each is again when a run is replaced.
PUBLISHED: dict[str, Any] = {}
Recorder = Callable[[Any], Any]


class OpenSpans(threading.local):
    """Per thread: the spans it started in this run and has not ended, outermost first. Every
    thread's stack is also in ``stacks`` (the run's, by thread id), so that SIGTERM can end the
    spans of all threads."""

    def __init__(self, stacks: dict[int, list[Opened]]) -> None:
        super().__init__()
        self.stack: list[Opened] = []
        stacks[threading.get_ident()] = self.stack


class TaskStack(list[Any]):
    """One asyncio task's open spans, outermost first (a list that ``Run.task_stacks`` can hold
    weakly: it lives as long as the task's context)."""

    __slots__ = ("__weakref__",)
    # one per task: compared by identity (in the WeakSet), not by content
    __hash__ = object.__hash__  # type: ignore[assignment]  # list declares itself unhashable
    __eq__ = object.__eq__


# (the task, the run, its stack) of the task running now: set in the task's own context
_TASK_STACK: contextvars.ContextVar[tuple[Any, Run, TaskStack]] = contextvars.ContextVar(
    "megatron_otel_task_stack"
)


def task_stack(run: Run) -> TaskStack | None:
    """The open-span stack of the asyncio task running on this thread, or None outside one.

    Spans are kept per task, not per thread: tasks interleaved on one event loop (requests on a
    server) each start and end their spans on their own stack, so one task's span never ends or
    parents another's. The stack lives in the task's own context (a ``ContextVar`` set there; a
    task a span starts inherits its parent's value, which names another task, and gets its own),
    and weakly in ``run.task_stacks`` for SIGTERM. No event loop is ever looked for before
    ``asyncio`` is imported."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None or asyncio._get_running_loop() is None:
        return None
    task = asyncio.current_task()
    if task is None:  # a callback of the loop (call_soon): it runs to its end, as a thread does
        return None
    entry = _TASK_STACK.get(None)
    if entry is not None and entry[0]() is task and entry[1] is run:
        return entry[2]
    stack = TaskStack()
    _TASK_STACK.set((weakref.ref(task), run, stack))
    run.task_stacks.add(stack)
    return stack


@dataclass(eq=False)
class Run:
    """One run: from ``configure()`` (or ``reset()``) to ``shutdown()``, replaced as a whole.

    A new field needs only its default here: a new run starts from the defaults.
    """

    # ended: shut down, or inherited across a fork: nothing to end at exit; configure() replaces it
    ended: bool = False
    # The configuration: the tracer (None while no span records), the current meter's recorders,
    # the settings and resource attributes the worker bootstrap passes on, the timeouts.
    tracer: Tracer | None = None
    programmatic: bool = False  # enable() called by the program: configure() keeps its groups
    recorders: dict[str, Recorder] = field(default_factory=dict)
    settings: Settings | None = None
    recording_reason: str = ""  # why spans take the SDK path, when they do (logged once)
    resource: dict[str, Any] = field(default_factory=dict)
    flush_timeout: float = 5.0  # seconds for flush and shutdown at the end of a run, in all
    sigterm_timeout: float = 0.0  # seconds for the flush on SIGTERM
    # Providers created (owned: shut down) or given (borrowed: flushed only); the bounded batch
    # processors of the owned ones (shut down with a timeout).
    owned: list[Any] = field(default_factory=list)
    borrowed: list[Any] = field(default_factory=list)
    processors: list[Any] = field(default_factory=list)
    # Open spans: each thread's stack (``open_spans.stack``), and all of them by thread id.
    stacks: dict[int, list[Opened]] = field(default_factory=dict)
    open_spans: OpenSpans = field(init=False)
    # and each asyncio task's (``task_stack``), while the task lives
    task_stacks: weakref.WeakSet[TaskStack] = field(default_factory=weakref.WeakSet)
    # The lifecycle spans and training progress; first_time() keys.
    startup_done: bool = False
    startup: LifecycleEntry | None = None
    interval: LifecycleEntry | None = None
    link_to: SpanContext | None = None  # the span context the next interval links to
    save_interval: int | None = None
    interval_index: int = 0
    training: bool = False
    seen: set[str] = field(default_factory=set)
    # Many ranks (``_ranks``): the run id every rank agreed on, the tracer's id generator (the SDK
    # tracer's or the LeanTracer's; None for another tracer), the trace root spans join now
    # (startup, interval, after training; 0 before configure), this rank's pipeline neighbours
    # (None: no links).
    run_id: bytes = b""
    ids: Any = None
    trace_id: int = 0
    pipeline: Any = None

    def __post_init__(self) -> None:
        self.open_spans = OpenSpans(self.stacks)


@dataclass(eq=False)
class Process:
    """What the runtime remembers for the life of the process: one instance, ``PROCESS``.

    A new field needs its default here, and a line in ``_process._after_fork_in_child`` when a
    forked child must not inherit its value.
    """

    run: Run = field(default_factory=Run)
    warned: set[tuple[str, str]] = field(default_factory=set)  # (span or "", what) logged once
    exit_hook: bool = False  # shutdown() registered with atexit
    sigterm_installed: bool = False
    previous_sigterm: Any = None  # the SIGTERM handler ours replaced, run after ours
    fork_registered: bool = False  # the after-fork handler registered (os.register_at_fork)
    meters: dict[int, tuple[Any, dict[str, Recorder]]] = field(default_factory=dict)
    gauge_values: dict[str, Any] = field(default_factory=dict)  # observable gauges' last values
    processor_class: Any = None  # BoundedBatchSpanProcessor, defined on first use


PROCESS = Process()


def new_run(ended: bool = False) -> Run:
    """Replace the current run with a fresh one (``ended``: one with nothing to end at exit);
    every group flag and ``METRICS`` off. Return it."""
    for name in FLAGS.values():
        NAMESPACE[name] = False
    NAMESPACE["METRICS"] = False
    NAMESPACE.update(PUBLISHED)
    run = PROCESS.run = Run(ended=ended)
    return run


def flag(name: str) -> bool:
    """The current value of the package attribute ``name`` (a group flag or ``METRICS``)."""
    return bool(NAMESPACE.get(name, False))


def set_flag(name: str, value: bool) -> None:
    """Set the package attribute ``name`` (a group flag or ``METRICS``)."""
    NAMESPACE[name] = value


def warn_once(name: str, action: str) -> None:
    """Log, with the traceback, the first time ``action`` fails for span ``name`` (called in an
    ``except`` block)."""
    if (name, action) not in PROCESS.warned:
        PROCESS.warned.add((name, action))
        LOG.warning("telemetry: %s failed for span %r", action, name, exc_info=True)  # noqa: LOG014


def log_once(key: str, message: str, *args: object, exc_info: bool = False) -> None:
    """Log a warning the first time ``key`` is seen in this process."""
    if ("", key) not in PROCESS.warned:
        PROCESS.warned.add(("", key))
        LOG.warning("telemetry: " + message, *args, exc_info=exc_info)
