"""The job's lifecycle spans, exit hooks, shutdown and reset.

``startup()`` opens the startup span (a new trace, backdated to program start) with backdated phase
children; ``begin_training()`` closes it and opens the first training interval, a new root linked
to it; ``train_iteration()`` re-roots at every save_interval boundary; ``end_training()`` ends the
last interval. ``shutdown()`` ends whatever is open and flushes, once per run: at the end of the
run, at interpreter exit, and on SIGTERM when a drain timeout is configured. ``reset()`` ends the
run and clears its state so that the next ``configure()`` starts a fresh one.
"""

from __future__ import annotations

import atexit
import contextvars
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from ._config import env_timestamps
from ._export import flush_providers, shutdown_providers
from ._ranks import derived_id, interval_trace_id, start_root, startup_trace_id
from ._spans import NO_ATTRIBUTES, SPAN_ATTRIBUTES, abort_open_spans, disable, end_open_spans
from ._state import STATE, flag, log_once, set_flag, warn_once
from ._taxonomy import FLAGS, INTERVAL, PHASES, PRE_STARTUP, STARTUP

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer

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
    tracer = STATE.tracer
    if STATE.startup_done or tracer is None:
        return
    STATE.startup_done = True
    try:
        stamps = env_timestamps()
        stamps.update((k, float(v)) for k, v in timestamps.items() if v is not None)
        if STARTUP is not None:
            stamps.setdefault(STARTUP[2], _process_start())
        STATE.trace_id = startup_trace_id(STATE.run_id) if STATE.run_id else 0
        if STARTUP is not None and flag(STARTUP[1]):
            name = STARTUP[0]
            values = _attributes(name, attributes)
            span = start_root(
                tracer,
                STATE.ids,
                STATE.trace_id,
                name,
                context=otel_context.Context(),
                attributes=values,
                start_time=_ns(stamps[STARTUP[2]]),
            )
            token = otel_context.attach(otel_trace.set_span_in_context(span))
            STATE.startup = (span, token)
            STATE.link_to = span.get_span_context()
        parent = (
            otel_trace.set_span_in_context(STATE.startup[0])
            if STATE.startup is not None
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
    if STATE.training:
        end_training()
    every = save_interval if save_interval is not None and save_interval > 0 else None
    STATE.save_interval = every
    STATE.interval_index = iteration // every if every else 0
    STATE.training = True
    if STATE.startup is not None:
        _end(STATE.startup, False)
        STATE.startup = None
    _open_interval(iteration)


def train_iteration(iteration: int) -> None:
    """Re-root when ``iteration`` enters a new save_interval; call at the top of every iteration."""
    every = STATE.save_interval
    if every is None or not STATE.training or iteration // every == STATE.interval_index:
        return
    STATE.interval_index = iteration // every
    if STATE.interval is not None:
        _end(STATE.interval, False)
        STATE.interval = None
    _open_interval(iteration)


def end_training() -> None:
    """End the current training interval; idempotent. Never raises."""
    STATE.training = False
    end_open_spans()
    if STATE.run_id:  # what runs after training (the final evaluation, ...) shares one trace
        STATE.trace_id = derived_id(STATE.run_id, "after-training")
    if STATE.interval is not None:
        entry, STATE.interval = STATE.interval, None
        _end(entry, True)


def in_training() -> bool:
    """True between begin_training() and end_training()."""
    return STATE.training


def first_time(key: str) -> bool:
    """True the first time this run calls it with ``key``."""
    if key in STATE.seen:
        return False
    STATE.seen.add(key)
    return True


def set_current_attributes(attributes: Callable[[], Mapping[str, Any]]) -> None:
    """Set ``attributes()`` on the current span when it records. Never raises."""
    if STATE.tracer is None:
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
    if STATE.tracer is None:
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
    if STATE.tracer is None:
        return fn
    captured = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> Any:
        return captured.copy().run(fn, *args, **kwargs)

    return run


def shutdown() -> None:
    """End every open lifecycle span, flush, and shut down the providers the runtime created,
    within the flush timeout (``MEGATRON_OTEL_FLUSH_TIMEOUT_S``) in all.

    Once per run; never raises.
    """
    if STATE.shutdown_done:
        return
    STATE.shutdown_done = True
    end_training()
    if STATE.startup is not None:
        entry, STATE.startup = STATE.startup, None
        _end(entry, True)
    disable()
    STATE.tracer = None
    set_flag("METRICS", False)
    shutdown_providers(STATE.owned, STATE.borrowed, STATE.flush_timeout)


def reset() -> None:
    """Shut this run down and clear its state; the next configure() starts a fresh run.

    Exit hooks stay installed.
    """
    shutdown()
    STATE.clear_run()


def active() -> bool:
    """Whether a run is configured and not shut down."""
    return not STATE.shutdown_done and (
        STATE.tracer is not None or flag("METRICS") or bool(STATE.owned)
    )


def adopt(provider: Any, owned: bool) -> None:
    """Flush ``provider`` at shutdown; shut it down too when the runtime created it."""
    (STATE.owned if owned else STATE.borrowed).append(provider)


def install_exit_hooks(sigterm_timeout: float) -> None:
    """Once per process: shutdown() at interpreter exit; with ``sigterm_timeout`` > 0, a SIGTERM
    handler that ends the spans and flushes for up to that long, then runs the previous handler."""
    STATE.sigterm_timeout = sigterm_timeout
    if not STATE.hooks_installed:
        STATE.hooks_installed = True
        atexit.register(_at_exit)
    if sigterm_timeout > 0 and not STATE.sigterm_installed:
        try:
            previous = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):  # not the main thread
            log_once("sigterm", "cannot install the SIGTERM handler", exc_info=True)
        else:
            STATE.sigterm_installed = True
            STATE.previous_sigterm = previous


def _at_exit() -> None:
    shutdown()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: a Python handler installed before ours runs first. When it returns, the process
    goes on (Megatron's ``--exit-signal-handler`` only sets a flag, then training saves a checkpoint
    and exits): the spans stay open, the signal is an event on the open lifecycle span, and what
    has ended is flushed. When it raises, and when the previous action is the default one (the
    process ends), every open span of every thread ends with an ERROR status and everything is
    flushed within the timeout, then the exception propagates or the default action runs."""
    previous = STATE.previous_sigterm
    if callable(previous):
        try:
            previous(signum, frame)
        except BaseException:
            _drain(signum)
            raise
        _note(signum)
    elif previous == signal.SIG_IGN:
        _note(signum)
    else:
        _drain(signum)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _note(signum: int) -> None:
    """The run goes on after the signal: record it on the open lifecycle span, flush what ended."""
    try:
        for entry in (STATE.interval, STATE.startup):
            if entry is not None:
                entry[0].add_event(_signal_name(signum))
        flush_providers(STATE.owned + STATE.borrowed, STATE.sigterm_timeout)
    except Exception:
        log_once("sigterm-note", "recording the signal failed", exc_info=True)


def _drain(signum: int) -> None:
    """The process ends: end every open span with an ERROR status, flush within the timeout."""
    try:
        reason = f"terminated by {_signal_name(signum)}"
        abort_open_spans(reason)
        for entry in (STATE.interval, STATE.startup):
            if entry is not None:
                entry[0].set_status(Status(StatusCode.ERROR, reason))
                _end(entry, False)
        STATE.interval = STATE.startup = None
        STATE.training = False
        flush_providers(STATE.owned + STATE.borrowed, STATE.sigterm_timeout)
    except Exception:
        log_once("sigterm-drain", "draining on SIGTERM failed", exc_info=True)


def _after_fork_in_child() -> None:
    """In a forked child: forget the parent's run without ending or exporting any of it.

    The child records nothing (a DataLoader worker) until it is set up as a worker
    (``setup_worker``/``in_worker``), which then starts a fresh run with its own providers; the
    parent's open spans and providers are the parent's to end and flush. Never raises.
    """
    try:
        from ._state import STACKS, OpenSpans

        for name in FLAGS.values():
            set_flag(name, False)
        set_flag("METRICS", False)
        STATE.tracer = None
        STATE.programmatic = False
        STACKS.clear()
        STATE.open_spans = OpenSpans()
        STATE.startup = STATE.interval = None
        STATE.training = False
        STATE.owned, STATE.borrowed = [], []
        STATE.settings = None
        STATE.shutdown_done = True  # nothing to end at exit; the next configure() starts afresh
    except Exception:
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _open_interval(iteration: int) -> None:
    tracer = STATE.tracer
    if INTERVAL is None or tracer is None or not flag(INTERVAL[1]):
        return
    try:
        name = INTERVAL[0]
        values = {
            **SPAN_ATTRIBUTES.get(name, NO_ATTRIBUTES),
            "megatron.iteration": iteration,
            "megatron.trace_interval": STATE.interval_index,
        }
        links = [Link(STATE.link_to)] if STATE.link_to is not None else None
        run_id = STATE.run_id
        STATE.trace_id = interval_trace_id(run_id, STATE.interval_index) if run_id else 0
        span = start_root(
            tracer,
            STATE.ids,
            STATE.trace_id,
            name,
            context=otel_context.Context(),
            attributes=values,
            links=links,
        )
        token = otel_context.attach(otel_trace.set_span_in_context(span))
        STATE.interval = (span, token)
        STATE.link_to = span.get_span_context()
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
    span: tuple[str, str, str, str],
    times: dict[str, float],
    parent: Context | None,
    trace: str = "",
) -> None:
    name, group_flag, start_key, end_key = span
    start, end = times.get(start_key), times.get(end_key)
    if start is None or end is None or not flag(group_flag):
        return
    started = start_root(
        tracer,
        STATE.ids,  # a root (pre_startup; phases while the startup span is off): a shared trace
        derived_id(STATE.run_id, trace) if trace and STATE.run_id else STATE.trace_id,
        name,
        context=parent if parent is not None else otel_context.Context(),
        attributes=SPAN_ATTRIBUTES.get(name, NO_ATTRIBUTES),
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
