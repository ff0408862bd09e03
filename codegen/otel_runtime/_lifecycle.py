"""The job's training-span lifecycle: the startup span, the training intervals, and the helpers
instrumented code calls on the current span.

``startup()`` opens the startup span (a new trace, backdated to program start) with backdated phase
children; ``begin_training()`` closes it and opens the first training interval, a new root linked
to it; ``train_iteration()`` re-roots at every save_interval boundary; ``end_training()`` ends the
last interval. All of it lives in the current run (``PROCESS.run``); ending a run (shutdown,
SIGTERM, fork) is ``_process``'s.
"""

from __future__ import annotations

import contextvars
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ._config import env_timestamps
from ._ranks import derived_id, interval_trace_id, start_root, startup_trace_id
from ._spans import NO_ATTRIBUTES, SPAN_ATTRIBUTES, end_open_spans
from ._state import PROCESS, flag, log_once, warn_once
from ._taxonomy import INTERVAL, PHASES, PRE_STARTUP, STARTUP

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer

    from ._records import Backdated
    from ._state import LifecycleEntry

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import Link, Status, StatusCode
except ImportError:  # opentelemetry is optional: without it no tracer is set, nothing below runs
    pass

_T = TypeVar("_T")
_IMPORT_TIME = time.time()


def startup(
    timestamps: Mapping[str, float | None],
    attributes: Callable[[], Mapping[str, Any]] | None = None,
) -> None:
    """Open the startup span, backdated, with its backdated phases; once per run. Never raises."""
    run = PROCESS.run
    tracer = run.tracer
    if run.startup_done or tracer is None:
        return
    run.startup_done = True
    try:
        stamps = env_timestamps()
        stamps.update((k, float(v)) for k, v in timestamps.items() if v is not None)
        if STARTUP is not None:
            stamps.setdefault(STARTUP.start, _process_start())
        run.trace_id = startup_trace_id(run.run_id) if run.run_id else 0
        if STARTUP is not None and flag(STARTUP.flag):
            name = STARTUP.name
            values = _attributes(name, attributes)
            span = start_root(
                tracer,
                run.ids,
                run.trace_id,
                name,
                context=otel_context.Context(),
                attributes=values,
                start_time=_ns(stamps[STARTUP.start]),
            )
            token = otel_context.attach(otel_trace.set_span_in_context(span))
            run.startup = (span, token)
            run.link_to = span.get_span_context()
        parent = (
            otel_trace.set_span_in_context(run.startup[0])
            if run.startup is not None
            else otel_context.Context()
        )
        for entry in PHASES:
            _backdated(tracer, entry, stamps, parent)
        for entry in PRE_STARTUP:  # a trace of its own, shared by the ranks
            _backdated(tracer, entry, stamps, None, "pre_startup")
    except Exception:
        log_once("startup", "opening the startup spans failed", exc_info=True)


def begin_training(iteration: int, save_interval: int | None) -> None:
    """Close the startup span and open the first training interval. Never raises."""
    if PROCESS.run.training:
        end_training()
    run = PROCESS.run
    every = save_interval if save_interval is not None and save_interval > 0 else None
    run.save_interval = every
    run.interval_index = iteration // every if every else 0
    run.training = True
    if run.startup is not None:
        _end(run.startup, False)
        run.startup = None
    _open_interval(iteration)


def train_iteration(iteration: int) -> None:
    """Re-root when ``iteration`` enters a new save_interval; call at the top of every iteration."""
    run = PROCESS.run
    every = run.save_interval
    if every is None or not run.training or iteration // every == run.interval_index:
        return
    run.interval_index = iteration // every
    if run.interval is not None:
        _end(run.interval, False)
        run.interval = None
    _open_interval(iteration)


def end_training() -> None:
    """End the current training interval; idempotent. Never raises."""
    run = PROCESS.run
    run.training = False
    end_open_spans()
    if run.run_id:  # what runs after training (the final evaluation, ...) shares one trace
        run.trace_id = derived_id(run.run_id, "after-training")
    if run.interval is not None:
        entry, run.interval = run.interval, None
        _end(entry, True)


def in_training() -> bool:
    """True between begin_training() and end_training()."""
    return PROCESS.run.training


def first_time(key: str) -> bool:
    """True the first time this run calls it with ``key``."""
    seen = PROCESS.run.seen
    if key in seen:
        return False
    seen.add(key)
    return True


def set_current_attributes(attributes: Callable[[], Mapping[str, Any]]) -> None:
    """Set ``attributes()`` on the current span when it records. Never raises."""
    if PROCESS.run.tracer is None:
        return
    try:
        span = otel_trace.get_current_span()
        if span.is_recording():
            span.set_attributes(attributes())
    except Exception:
        log_once("current", "setting attributes on the current span failed", exc_info=True)


def stamp(key: str, value: _T) -> _T:
    """Set ``key`` = ``value`` on the current span when it records; return ``value`` unchanged.

    Wraps a call whose result is worth recording (the async checkpoint queue's call indices).
    Never raises.
    """
    if PROCESS.run.tracer is None:
        return value
    try:
        span = otel_trace.get_current_span()
        if span.is_recording():
            recorded: Any = list(value) if isinstance(value, (list, tuple)) else value
            span.set_attribute(key, recorded)
    except Exception:
        log_once(f"stamp:{key}", "recording %s failed", key, exc_info=True)
    return value


def in_context(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run in a copy of the caller's context (for executor.submit); ``fn`` when off."""
    if PROCESS.run.tracer is None:
        return fn
    captured = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> Any:
        return captured.copy().run(fn, *args, **kwargs)

    return run


def end_lifecycle() -> None:
    """End the training interval and the startup span, recording an escaping exception (the end
    of a run). Never raises."""
    end_training()
    run = PROCESS.run
    if run.startup is not None:
        entry, run.startup = run.startup, None
        _end(entry, True)


def abort_lifecycle(reason: str) -> None:
    """End the open lifecycle spans with an ERROR status ``reason`` (the process is ending)."""
    run = PROCESS.run
    for entry in (run.interval, run.startup):
        if entry is not None:
            entry[0].set_status(Status(StatusCode.ERROR, reason))
            _end(entry, False)
    run.interval = run.startup = None
    run.training = False


def add_lifecycle_event(name: str) -> None:
    """Add event ``name`` to the open lifecycle spans."""
    run = PROCESS.run
    for entry in (run.interval, run.startup):
        if entry is not None:
            entry[0].add_event(name)


def _open_interval(iteration: int) -> None:
    run = PROCESS.run
    tracer = run.tracer
    if INTERVAL is None or tracer is None or not flag(INTERVAL.flag):
        return
    try:
        name = INTERVAL.name
        values = {
            **SPAN_ATTRIBUTES.get(name, NO_ATTRIBUTES),
            "megatron.iteration": iteration,
            "megatron.trace_interval": run.interval_index,
        }
        links = [Link(run.link_to)] if run.link_to is not None else None
        run.trace_id = interval_trace_id(run.run_id, run.interval_index) if run.run_id else 0
        span = start_root(
            tracer,
            run.ids,
            run.trace_id,
            name,
            context=otel_context.Context(),
            attributes=values,
            links=links,
        )
        token = otel_context.attach(otel_trace.set_span_in_context(span))
        run.interval = (span, token)
        run.link_to = span.get_span_context()
    except Exception:
        log_once("interval", "opening the training interval span failed", exc_info=True)


def _end(entry: LifecycleEntry, record_error: bool) -> None:
    """End a lifecycle span; restore the context when it is still the current one."""
    span, token = entry
    try:
        if otel_trace.get_current_span() is span:
            otel_context.detach(token)
        error = sys.exc_info()[1] if record_error else None
        if error is not None and not _benign(error):
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()
    except Exception:
        log_once("end", "ending a lifecycle span failed", exc_info=True)


def _backdated(
    tracer: Tracer,
    span: Backdated,
    times: dict[str, float],
    parent: Context | None,
    trace: str = "",
) -> None:
    start, end = times.get(span.start), times.get(span.end)
    if start is None or end is None or not flag(span.flag):
        return
    run = PROCESS.run
    started = start_root(
        tracer,
        run.ids,  # a root (pre_startup; phases while the startup span is off): a shared trace
        derived_id(run.run_id, trace) if trace and run.run_id else run.trace_id,
        span.name,
        context=parent if parent is not None else otel_context.Context(),
        attributes=SPAN_ATTRIBUTES.get(span.name, NO_ATTRIBUTES),
        start_time=_ns(start),
    )
    started.end(end_time=_ns(max(start, end)))


def _attributes(name: str, extra: Callable[[], Mapping[str, Any]] | None) -> dict[str, Any]:
    values = dict(SPAN_ATTRIBUTES.get(name, NO_ATTRIBUTES))
    if extra is not None:
        try:
            values.update(extra())
        except Exception:
            warn_once(name, "evaluating attributes")
    return values


def _benign(error: BaseException) -> bool:
    if isinstance(error, SystemExit):
        return error.code is None or error.code == 0
    return isinstance(error, GeneratorExit)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _process_start() -> float:
    """When this process started (epoch seconds), from /proc; else the runtime's import time."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rpartition(")")[2].split()
        with open("/proc/stat", encoding="ascii") as stat:
            boot = next(int(line.split()[1]) for line in stat if line.startswith("btime "))
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        if 0 < started <= _IMPORT_TIME + 1:
            return started
    except Exception:
        pass
    return _IMPORT_TIME
