"""The tracer of the lean recording path and its context: ``LeanTracer`` starts ``LeanSpan``
objects (``_lean_span``) whose parent is the current span; this module is the one place the lean
path reads and sets the current span.

On the training thread a statement site's span (``LeanTracer.open``) costs: the call site's
attributes evaluated (a dict, not validated here), the current context read from the API's context
variable, one ``LeanSpan`` (name, parent, the parent's trace, start time) pushed on the thread's
open-span stack. No context is made per span: the outermost span of a nesting (``_Nesting``) sets
one ``_LeanContext``, whose current span is looked up on the nesting when someone asks (the exact
rule is ``_LeanContext``'s). How the current context is read and set: ``_context_access``.

A taxonomy span started inside a foreign span parents to that span (and inherits its trace state);
a child of a sampled-out foreign parent is recorded through the SDK tracer (the sampler decides).
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import _ids
from ._lean_span import _FREE, LeanSpan, SpanBase, exception, fits, new_span
from ._state import PROCESS, PUBLISHED, task_stack, warn_once

if TYPE_CHECKING:
    import collections

    from ._lean_recorder import LeanRecorder
    from ._state import Run

try:  # the API only (opentelemetry is optional: without it nothing here is used)
    from opentelemetry import trace as otel_trace
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind
except ImportError:
    _TracerBase: Any = object
    _ContextBase: Any = dict
else:
    _TracerBase = otel_trace.Tracer
    _ContextBase = Context

_SAMPLED = 0x01
_RANDOM_TRACE_ID = 0x02
_time_ns = time.time_ns
_get_ident = threading.get_ident
# Ended spans to start again (_lean_span.recycle), and taking one: names no import binds (their
# method calls would compile to a bound method made per call)
_spare: list[LeanSpan] = _FREE
_reuse = _FREE.pop
# The current context's getter (LeanTracer's ``current``: every tracer's is the process's)
_current: Callable[[], Any] = dict


def _new_lean() -> LeanSpan:
    """A LeanSpan as ``recycle`` keeps one: its id 0, no attributes, events, links or status."""
    span = LeanSpan()
    span._id = 0
    span._extra = span._more = None
    return span


# asyncio's _get_running_loop once asyncio is imported (no loop can run before): a span opened
# while a task runs never joins the nesting of the code that started the loop (_state.task_stack)
_running_loop: Callable[[], Any] | None = None


def _watch_loops() -> None:
    global _running_loop
    _running_loop = sys.modules["asyncio"]._get_running_loop


class LeanTracer(_TracerBase):  # type: ignore[misc]  # the API's Tracer when installed
    """The runtime's tracer on the lean path: ``LeanSpan`` objects whose parent is the current span.

    ``sdk_tracer`` (the same provider's SDK tracer) records what the lean path does not: children
    of a sampled-out parent, spans of another kind.

    Ids of ``start_span`` come from ``span_id``/``trace_id`` (the per-process generator of
    ``_ids``; ``choose_ids`` swaps in a ``_ranks.ChosenIds``, which hands out the ids chosen for
    this thread's next span). The statement sites' spans (``open``) draw their span ids lazily from
    ``_ids`` (no id is ever chosen for them).

    ``open`` reads and sets the current context through the API's context variable itself when
    the API's runtime context is its ``contextvars`` one (always, unless ``OTEL_PYTHON_CONTEXT``
    names another when ``opentelemetry.context`` is first imported), through ``context.attach``
    and ``detach`` otherwise.
    """

    def __init__(self, recorder: LeanRecorder, sdk_tracer: Any) -> None:
        self.recorder = recorder
        self.sdk_tracer = sdk_tracer
        self.span_id: Any = _ids.span_id
        self.trace_id: Any = _ids.trace_id
        global _current
        self.current, self.attach, self.detach, self.key = _context_access()
        _current = self.current  # the process's (the API's runtime context): a global, read fast
        # _spans' SDK path, for pipeline transfers (their names: ``_ranks.P2P``) while the run
        # has pipeline links, and children of sampled-out spans: _spans sets both
        self.transfers: Mapping[str, Any] = {}
        self.fallback: Callable[[Any, Run, str, Any], Any] = _no_fallback

    def choose_ids(self, ids: Any) -> None:
        """Draw ids from ``ids`` (an SDK ``IdGenerator``), as the SDK tracer does."""
        self.span_id = ids.generate_span_id
        self.trace_id = ids.generate_trace_id

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: Any = None,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Any] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Any:
        """A started span: lean unless it is not INTERNAL or its parent was sampled out."""
        if kind is not None and kind is not SpanKind.INTERNAL:
            return self.sdk_tracer.start_span(
                name, context, kind, attributes, links, start_time, record_exception
            )
        parent: Any = otel_trace.get_current_span(context)
        if type(parent) is LeanSpan:
            trace = parent._trace
        else:
            parent = parent.get_span_context()
            if parent is not None and parent.is_valid:
                if not parent.trace_flags.sampled:  # the sampler's decision
                    return self.sdk_tracer.start_span(
                        name, context, SpanKind.INTERNAL, attributes, links, start_time
                    )
                trace = _child_trace(parent)
            else:
                parent = None
                trace = (self.trace_id(), _SAMPLED | _RANDOM_TRACE_ID, None)
        span = new_span(
            self.recorder,
            name,
            parent,
            trace,
            None if attributes is None else dict(attributes),
            _time_ns() if start_time is None else start_time,
            self.span_id(),
        )
        if links:
            for link in links:
                span.add_link(link.context, link.attributes)
        return span

    def open(
        self, name: str, attributes: Callable[[], Mapping[str, Any]] | None = None
    ) -> LeanSpan | Any:
        """``otel.start_span(name, attributes)`` on the lean path (the package's ``start_span``
        is this method while the run records lean): a ``LeanSpan`` started as the current one, on
        this thread's open-span stack; None when it cannot start. Never raises.

        ``attributes`` is the call site's, evaluated here and kept as given (validated, and the
        span group attributes added, on export). A pipeline transfer under a pipeline's links and
        a child of a sampled-out foreign span go through ``_spans``' SDK path (``fallback``).

        No context is made per span: the outermost span of a nesting on a thread sets a
        ``_LeanContext`` as the current context, and the spans opened inside it only go on the
        thread's stack; that context's current span is the innermost of them (the rule is
        ``_LeanContext``'s)."""
        try:
            current = _current()
            if type(current) is _LeanContext:
                nesting = current._nesting
                if (
                    nesting.owner is self  # open, not handed to a stream, this run's
                    and nesting.ident == _get_ident()
                    and (_running_loop is None or _running_loop() is None)
                    and name not in self.transfers
                ):  # inside this thread's nesting: the common case, inline
                    top = nesting.top
                    if _spare:  # an ended span nothing references (_lean_span.recycle):
                        try:  # its id 0, no attributes, events, links or status
                            span = _reuse()
                        except IndexError:  # another thread took the last
                            span = _new_lean()
                    else:
                        span = _new_lean()
                    span._name = name
                    span._parent = top
                    span._trace = top._trace
                    if attributes is not None:  # (a recycled span's _extra is None already)
                        # _evaluated, inline: one call fewer on the training thread
                        try:
                            extra = attributes()
                        except Exception:
                            warn_once(name, "evaluating attributes")
                            extra = None
                        if type(extra) is not dict and extra is not None:
                            extra = dict(extra)  # as the SDK path: what it cannot read fails
                        span._extra = extra
                    span._state = nesting
                    span._handled = exception()  # being handled: its end is not an error
                    span._start = _time_ns()
                    nesting.stack.append(span)
                    nesting.top = span
                    return span
            return self._open_nesting(name, attributes, current)
        except Exception:  # RecursionError included
            try:
                warn_once(name, "starting the span")
            except Exception:  # logging at the recursion limit
                pass
            return None

    def _open_nesting(
        self, name: str, attributes: Callable[[], Mapping[str, Any]] | None, current: Any
    ) -> LeanSpan | Any:
        """``open`` for the outermost span of a nesting: a root, a child of a span another
        tracer started, or a span ``fallback`` records."""
        run = PROCESS.run
        if run.tracer is not self:  # a past run's open(), kept: the current run records it
            return PUBLISHED["start_span"](name, attributes)
        if run.pipeline is not None and name in self.transfers:  # a pipeline transfer: linked ids
            return self.fallback(self, run, name, attributes)
        parent = current.get(self.key)
        if type(parent) is LeanSpan:
            trace = parent._trace
        else:
            context = None
            if parent is not None and isinstance(parent, SpanBase):  # no ABC check for a root
                context = parent.get_span_context()
            if context is None or not context.is_valid:
                # no id is ever chosen for open()'s spans: the per-process generator's, directly
                parent = None
                trace = (run.trace_id or _ids.trace_id(), _SAMPLED | _RANDOM_TRACE_ID, None)
            elif not context.trace_flags.sampled:  # the sampler decides
                return self.fallback(self.sdk_tracer, run, name, attributes)
            else:
                parent = context
                trace = _child_trace(context)
        span = new_span(
            self.recorder,
            name,
            parent,
            trace,
            None if attributes is None else _evaluated(name, attributes),
            _time_ns(),
        )
        in_task = task_stack(run)
        stack = run.open_spans.stack if in_task is None else in_task
        nesting = _Nesting(self, stack, self.recorder, span)
        if in_task is not None:  # in an asyncio task each span sets its own context (never inline)
            nesting.owner = None
            nesting.ident = 0
        if _running_loop is None and "asyncio" in sys.modules:
            _watch_loops()
        state = _LeanContext(current, self.key, nesting)
        handled = exception()
        if handled is not None:
            span._handled = handled
        try:
            nesting.token = self.attach(state)
        except BaseException:
            span.end()
            raise
        span._state = nesting
        stack.append(span)
        return span

    @contextmanager
    def start_as_current_span(
        self,
        name: str,
        context: Any = None,
        kind: Any = None,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Any] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Any]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with otel_trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


def _child_trace(parent: Any) -> tuple[int, int, Any]:
    """The trace of a child of ``parent`` (a valid, sampled SpanContext): its trace id, trace state
    and random-trace-id flag, as the SDK's sampler and tracer pass them on."""
    flags = _SAMPLED | (parent.trace_flags & _RANDOM_TRACE_ID)
    return (parent.trace_id, flags, parent.trace_state)


def _context_access() -> tuple[Any, Any, Any, str]:
    """(get the current Context, attach a Context, detach a token, the current span's key).

    The API's own functions go through two calls each and copy the context twice to set a span;
    its ``contextvars`` runtime context is one ContextVar, used here directly when it is the one in
    use. The key is the API's ``set_span_in_context`` key, found through that function."""
    from opentelemetry import context as api
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    key = next(iter(otel_trace.set_span_in_context(otel_trace.INVALID_SPAN, api.Context())))
    runtime = getattr(api, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    if type(runtime) is ContextVarsRuntimeContext and isinstance(var, contextvars.ContextVar):
        return var.get, var.set, var.reset, key
    return api.get_current, api.attach, api.detach, key


def _no_fallback(tracer: Any, run: Any, name: str, attributes: Any) -> None:
    """The SDK path until _spans sets it: nothing recorded."""


def _evaluated(name: str, attributes: Callable[[], Mapping[str, Any]]) -> Any:
    """A call site's attributes, evaluated (None when they fail: logged once)."""
    try:
        extra = attributes()
    except Exception:
        warn_once(name, "evaluating attributes")
        return None
    if extra is not None and type(extra) is not dict:
        extra = dict(extra)  # as the SDK path: a span with what it cannot read fails
    return extra


class _Nesting:
    """Spans ``LeanTracer.open`` started on one thread under one context, open until the
    outermost (``root``) ends: the thread's stack and buffer, the innermost span open (``top``).

    ``owner`` is the tracer while spans open inline on ``top`` (checked once per span): None once
    the root has left, in an asyncio task (each span there sets its own context), and while the
    top span is handed over to a stream. ``token`` restores the context the root set; ``fits``:
    by its buffer's length, whether a span ends by an append alone (``_lean_span.fits``)."""

    __slots__ = (
        "fits", "ident", "owner", "recorder", "root", "spans", "stack", "token", "top", "tracer",
    )  # fmt: skip

    def __init__(
        self, tracer: LeanTracer, stack: list[Any], recorder: LeanRecorder, root: LeanSpan
    ) -> None:
        self.tracer = tracer
        self.owner: LeanTracer | None = tracer
        self.stack = stack  # the thread's open spans (the run's ``open_spans.stack``)
        self.recorder = recorder
        self.spans: collections.deque[Any] = recorder.local.spans  # the thread's buffer
        self.fits = fits(recorder.capacity, recorder.batch_size)
        self.root = root
        self.top: Any = root
        self.token: Any = None
        self.ident = _get_ident()


class _LeanContext(_ContextBase):  # type: ignore[misc]  # the API's Context when installed
    """The current context while a nesting of spans ``LeanTracer.open`` started is open on a
    thread (set by its outermost span): its current span is looked up when someone asks.

    The exact rule, for code that reads the current span (a foreign tracer's ``start_span``,
    ``get_current_span``, a propagator): on the thread that opened the nesting, the innermost
    span of it still open, else its outermost; on another thread (a context carried over to a
    worker), the nesting's outermost span, which was open when the context was taken. Reads
    through ``get``, ``[]`` and ``copy()`` (which the API's ``set_value`` uses) follow the rule;
    the raw mapping (``dict(context)``, iteration) holds the outermost span.
    """

    __slots__ = ("_key", "_nesting")  # read as slots: a dict subclass's own attributes are not

    def __init__(self, base: Mapping[str, Any], key: str, nesting: _Nesting) -> None:
        dict.__init__(self, base)
        dict.__setitem__(self, key, nesting.root)
        self._key = key
        self._nesting = nesting

    def _current(self) -> LeanSpan:
        nesting = self._nesting
        top = nesting.top
        if type(top) is LeanSpan and top._state is nesting and _get_ident() == nesting.ident:
            return top
        return nesting.root

    def get(self, key: str, default: Any = None) -> Any:
        if key == self._key:
            return self._current()
        return dict.get(self, key, default)

    def __getitem__(self, key: str) -> Any:
        if key == self._key:
            return self._current()
        return dict.__getitem__(self, key)

    def copy(self) -> dict[str, Any]:
        values = dict(self)
        values[self._key] = self._current()
        return values
