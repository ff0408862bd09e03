"""The process lifecycle: ending a run (shutdown, reset), the exit hooks, SIGTERM, and fork.

``shutdown()`` ends whatever is open and flushes, once per run: at the end of the run, at
interpreter exit, and on SIGTERM when a drain timeout is configured; it leaves an ended run in
place. ``reset()`` ends the run and puts a fresh one in its place, so that the next ``configure()``
starts anew. A forked child starts with an ended run of its own (the parent's is the parent's).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
from types import FrameType
from typing import Any

from ._export import flush_providers, shutdown_providers
from ._lifecycle import abort_lifecycle, add_lifecycle_event, end_lifecycle
from ._spans import abort_open_spans, disable
from ._state import LOG, PROCESS, flag, log_once, new_run


def shutdown() -> None:
    """End every open lifecycle span, flush, and shut down the providers the runtime created,
    within the flush timeout (``MEGATRON_OTEL_FLUSH_TIMEOUT_S``) in all.

    Once per run; never raises.
    """
    run = PROCESS.run
    if run.ended:
        return
    run.ended = True
    end_lifecycle()
    disable()
    new_run(ended=True)  # no tracer, no flags: nothing records while the providers shut down
    shutdown_providers(run.owned, run.borrowed, run.processors, run.flush_timeout)


def reset() -> None:
    """Shut this run down and start a fresh one; the next configure() configures it.

    Exit hooks stay installed.
    """
    shutdown()
    new_run()


def active() -> bool:
    """Whether a run is configured and not shut down."""
    run = PROCESS.run
    return not run.ended and (run.tracer is not None or flag("METRICS") or bool(run.owned))


def adopt(provider: Any, owned: bool) -> None:
    """Flush ``provider`` at shutdown; shut it down too when the runtime created it."""
    run = PROCESS.run
    (run.owned if owned else run.borrowed).append(provider)


def install_exit_hooks(sigterm_timeout: float) -> None:
    """Once per process: shutdown() at interpreter exit; with ``sigterm_timeout`` > 0, a SIGTERM
    handler that ends the spans and flushes for up to that long, then runs the previous handler."""
    PROCESS.run.sigterm_timeout = sigterm_timeout
    if not PROCESS.exit_hook:
        PROCESS.exit_hook = True
        atexit.register(_at_exit)
    if sigterm_timeout > 0 and not PROCESS.sigterm_installed:
        try:
            previous = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):  # not the main thread
            log_once("sigterm", "cannot install the SIGTERM handler", exc_info=True)
        else:
            PROCESS.sigterm_installed = True
            PROCESS.previous_sigterm = previous


def _at_exit() -> None:
    was_active = not PROCESS.run.ended
    shutdown()
    if was_active:
        _quiet_loggers()


def _quiet_loggers() -> None:
    """Silence OpenTelemetry's loggers and the runtime's once the exit flush is over.

    Exporter threads that outlive it (a slow or dead collector) are daemon threads; one writing a
    record to stderr while the interpreter finalizes can abort the process ("could not acquire
    lock for <stderr> at interpreter shutdown"). Nothing they could still say can be acted on, and
    the runtime's summary of what was lost is already written.
    """
    for name in ("opentelemetry", LOG.name):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: a Python handler installed before ours runs first. When it returns, the process
    goes on (Megatron's ``--exit-signal-handler`` only sets a flag, then training saves a checkpoint
    and exits): the spans stay open, the signal is an event on the open lifecycle span, and what
    has ended is flushed. When it raises, and when the previous action is the default one (the
    process ends), every open span of every thread ends with an ERROR status and everything is
    flushed within the timeout, then the exception propagates or the default action runs."""
    previous = PROCESS.previous_sigterm
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
        add_lifecycle_event(_signal_name(signum))
        run = PROCESS.run
        flush_providers(run.owned + run.borrowed, run.sigterm_timeout)
    except Exception:
        log_once("sigterm-note", "recording the signal failed", exc_info=True)


def _drain(signum: int) -> None:
    """The process ends: end every open span with an ERROR status, flush within the timeout."""
    try:
        reason = f"terminated by {_signal_name(signum)}"
        abort_open_spans(reason)
        abort_lifecycle(reason)
        run = PROCESS.run
        flush_providers(run.owned + run.borrowed, run.sigterm_timeout)
    except Exception:
        log_once("sigterm-drain", "draining on SIGTERM failed", exc_info=True)


def _after_fork_in_child() -> None:
    """In a forked child: forget the parent's run without ending or exporting any of it.

    The child records nothing (a DataLoader worker) until it is set up as a worker
    (``setup_worker``/``in_worker``), which then starts a fresh run with its own providers; the
    parent's open spans and providers are the parent's to end and flush. Never raises.
    """
    try:
        new_run(ended=True)  # nothing to end at exit; the next configure() starts afresh
    except Exception:
        pass


def register_fork_handler() -> None:
    """Once per process (a child inherits the registration): forget the run in a forked child."""
    if not PROCESS.fork_registered and hasattr(os, "register_at_fork"):
        PROCESS.fork_registered = True
        os.register_at_fork(after_in_child=_after_fork_in_child)


register_fork_handler()
