"""The span of the lean recording path (``LeanSpan``): what the training thread knows of a span,
nothing more, turned into the SDK's ``ReadableSpan`` (or OTLP bytes) on the export thread
(``_lean_recorder``).

A ``LeanSpan`` is a complete ``opentelemetry.trace.Span``: code that reads the current span inside
a taxonomy span (a foreign tracer's ``start_span``, ``set_current_attributes``, ``stamp``) sees it
and parents to it. At its end a span ``LeanTracer.open`` started (``_lean_tracer``) leaves its
thread's open-span stack, restores the context its nesting set, records an escaping exception and
is appended to its thread's buffer (the recorder's ``push``, inline): the training thread's whole
record. Its span id is drawn on first use, normally by the export thread.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import _ids
from ._state import warn_once

if TYPE_CHECKING:
    from typing import Self

    from ._lean_recorder import LeanRecorder
    from ._lean_tracer import _Nesting

try:  # the API only (opentelemetry is optional: without it nothing here is used)
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags
except ImportError:
    SpanBase: Any = object
else:
    SpanBase = otel_trace.Span

_time_ns = time.time_ns
_exc_info = sys.exc_info
_is_finalizing = sys.is_finalizing
# The exception being handled (sys.exception, Python >= 3.11: no tuple built per call).
exception: Callable[[], BaseException | None] = getattr(sys, "exception", lambda: _exc_info()[1])
_getrefcount = sys.getrefcount
# Ended LeanSpans nothing references, for LeanTracer.open to start again (``recycle``): at most
# _FREE_MAX, shared by every thread (list.append and list.pop hold the GIL).
_FREE: list[LeanSpan] = []
_FREE_MAX = 8192
# Held while a LeanSpan's id is drawn (on first use, by the training or the export thread).
_ID_LOCK = threading.Lock()


class LeanSpan:
    """One span recorded on the lean path: what the training thread knows, nothing more.
    Made by ``new_span`` (or inline, the same way), never with arguments: without an
    ``__init__`` making one costs least.

    An ``opentelemetry.trace.Span`` (registered as a virtual subclass: inheriting the API's class
    would give every span an attribute dictionary).

    ``_trace`` is ``(trace_id, trace flags, trace state)``, shared by every span of a trace
    (a child takes its parent's); the span id is drawn on first use (``span_id``): by the export
    thread, or by whoever reads the span's context first."""

    __slots__ = (
        "_context",
        "_end",
        "_extra",
        "_handled",
        "_id",
        "_more",
        "_name",
        "_parent",
        "_recorder",
        "_start",
        "_state",
        "_trace",
    )
    # Set on every span: its name, parent, trace, attributes (validated on export), id (0 until
    # drawn), start, and its events, links and status (``_more``: None until one is set, one
    # check on export).
    _name: str
    _parent: Any  # a LeanSpan, a SpanContext or None
    _trace: tuple[int, int, Any]  # trace id, trace flags, trace state (shared by a trace's spans)
    _extra: dict[str, Any] | None
    _id: int
    _start: int
    _more: _More | None
    # ``_state``: the nesting (``_lean_tracer._Nesting``) of a span ``LeanTracer.open`` started,
    # while it is open on its thread's stack; None otherwise. Such a span sets no more at its
    # start: ``_end`` (read only once ``_state`` is None: set when it ends or leaves its
    # nesting), ``_recorder`` (its nesting's until it leaves), ``_handled`` (set only when the
    # caller was already handling an exception: its end is not an error) and ``_context`` (built
    # on first use) are unset, or None in a span ``recycle`` kept: fewer writes on the training
    # thread. A span of the API's ``start_span`` (``new_span``) sets ``_end`` (None) and
    # ``_recorder``.
    _state: _Nesting | None
    _end: int | None
    _recorder: LeanRecorder
    _handled: BaseException | None
    _context: Any

    @property
    def _events(self) -> list[tuple[str, Any, int]] | None:
        more = self._more
        return None if more is None else more.events

    @property
    def _links(self) -> list[tuple[Any, Any]] | None:
        more = self._more
        return None if more is None else more.links

    @property
    def _status(self) -> Any:
        more = self._more
        return None if more is None else more.status

    def _more_set(self) -> _More:
        more = self._more
        if more is None:
            more = self._more = _More()
        return more

    @property
    def span_id(self) -> int:
        """This span's id, drawn from the per-process generator on first use."""
        value: int = self._id
        if not value:
            with _ID_LOCK:  # the training thread and the export thread may both ask first
                value = self._id
                if not value:
                    value = self._id = _ids.span_id()
        return value

    @property
    def trace_id(self) -> int:
        """This span's trace id."""
        value: int = self._trace[0]
        return value

    # -- the opentelemetry.trace.Span interface

    def get_span_context(self) -> SpanContext:
        """This span's SpanContext (built on first use)."""
        try:
            context: SpanContext | None = self._context
        except AttributeError:  # not built yet
            context = None
        # built, unless it is the one of this span object's past life (``recycle``): its id
        if context is None or context.span_id != self._id:
            trace_id, flags, trace_state = self._trace
            context = self._context = SpanContext(
                trace_id,
                self.span_id,
                is_remote=False,
                trace_flags=TraceFlags(flags),
                trace_state=trace_state,
            )
        return context

    def is_recording(self) -> bool:
        """True until the span ends."""
        return self._state is not None or self._end is None

    def set_attribute(self, key: str, value: Any) -> None:
        """Set one attribute (validated on export, as the SDK validates it)."""
        if self._state is not None or self._end is None:
            if self._extra is None:
                self._extra = {}
            self._extra[key] = value

    def set_attributes(
        self, attributes: Mapping[str, Any] | Callable[[], Mapping[str, Any]]
    ) -> None:
        """Set attributes (validated on export). A call site passes a callable (as to
        ``_spans.StartedSpan.set_attributes``): it is evaluated here, and its failure logged once,
        never raised."""
        if self._state is None and self._end is not None:
            return
        if callable(attributes):
            try:
                attributes = attributes()
                if self._extra is None:
                    self._extra = dict(attributes)
                else:
                    self._extra.update(attributes)
            except Exception:
                warn_once(self._name, "evaluating attributes")
            return
        if self._extra is None:
            self._extra = dict(attributes)
        else:
            self._extra.update(attributes)

    def add_event(
        self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None
    ) -> None:
        """Add an event (its attributes validated on export)."""
        if self._state is not None or self._end is None:
            more = self._more_set()
            if more.events is None:
                more.events = []
            more.events.append((name, attributes, _time_ns() if timestamp is None else timestamp))

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        """Link to ``context`` (a valid one)."""
        recording = self._state is not None or self._end is None
        if recording and context is not None and context.is_valid:
            more = self._more_set()
            if more.links is None:
                more.links = []
            more.links.append((context, attributes))

    def update_name(self, name: str) -> None:
        """Rename the span."""
        if self._state is not None or self._end is None:
            self._name = name

    def set_status(self, status: Any, description: str | None = None) -> None:
        """As the SDK's span: an OK status is final, UNSET is ignored."""
        if self._state is None and self._end is not None:
            return
        current = self._status
        if current is not None and current.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self._more_set().status = status
        elif isinstance(status, StatusCode) and status is not StatusCode.UNSET:
            self._more_set().status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """The SDK's exception event (type, message, stack trace, escaped), formatted now."""
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        exception_type = qualname
        if module and module != "builtins":
            exception_type = f"{module}.{qualname}"
        values: dict[str, Any] = {
            "exception.type": exception_type,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            values.update(attributes)
        self.add_event("exception", values, timestamp)

    def end(self, end_time: int | None = None) -> None:
        """End the span and queue it for export; a second call does nothing.

        A span ``LeanTracer.open`` started also leaves its thread's stack (spans opened after it
        and still open were left by an exception, as the "flat" form has no ``finally``: they are
        ended first, innermost first), stops being current and records an escaping exception.
        Never raises."""
        nesting = self._state
        if nesting is None:  # a span of the API's start_span, ended, or handed to a stream
            if self._end is None:
                self._end = _time_ns() if end_time is None else end_time
                self._recorder.push(self)
            return
        stack = nesting.stack
        try:
            last = stack.pop()
        except IndexError:  # emptied meanwhile by abort_open_spans() (SIGTERM)
            last = None
        if last is not self:
            if last is not None:
                stack.append(last)
            _unwind(stack, self)
        # the hot path of every span: off the stack, its parent the innermost again
        self._state = None
        nesting.top = self._parent
        if nesting.root is self:  # the outermost: the context its nesting set is restored
            try:
                _leave_root(nesting, self)
            except Exception:  # calling it at the recursion limit
                nesting.owner = None
        if exception() is not None:  # an exception escaping (or one handled before it began)
            try:
                self._escaping()
            except Exception:  # at the recursion limit: the span still ends, without it
                pass
        self._end = _time_ns() if end_time is None else end_time
        spans = nesting.spans
        try:
            if nesting.fits[len(spans)]:  # neither the span that fills a batch nor one too many
                spans.append(self)
                return
            _queue(nesting.recorder, spans, self)
        except Exception:  # a length past the table (an IndexError), or at the recursion limit
            recorder = nesting.recorder
            if len(spans) < recorder.capacity:
                spans.append(self)
                if len(spans) == recorder.batch_size:
                    try:
                        recorder.wake.set()
                    except Exception:  # the export thread's timer takes the batch
                        pass
            else:
                try:
                    nesting.recorder.push(self)  # full: dropped and counted
                except Exception:
                    pass

    def close(self) -> None:
        """End a span ``open`` started, leaving its thread's stack alone (``end`` without the
        pop). Never raises; nothing is logged after interpreter shutdown began (a ``__del__``
        at exit)."""
        nesting = self._state
        if nesting is None:
            return
        self._state = None
        nesting.top = self._parent
        if nesting.root is self:
            try:
                _leave_root(nesting, self)
            except Exception:  # calling it at the recursion limit
                nesting.owner = None
        if exception() is not None:
            try:
                self._escaping()
            except Exception:  # at the recursion limit: the span still ends, without it
                pass
        self._end = _time_ns()
        nesting.recorder.push(self)

    def leave(self) -> None:
        """Stop being current and leave the open-span stack, without ending: the span was
        handed over to a stream (``_streams.stream``), which ends it. Never raises."""
        nesting = self._state
        if nesting is None:
            return
        stack = nesting.stack
        if stack and stack[-1] is self:
            stack.pop()
        else:
            _unwind(stack, self)  # spans above it were left open by an exception: ended
        self._end = None  # open, out of its nesting: ended as a span of start_span
        self._recorder = nesting.recorder
        self._state = None
        nesting.top = self._parent
        if nesting.root is self:
            _leave_root(nesting, self, log_at_exit=True)
        elif nesting.ident and type(nesting.top) is LeanSpan:  # not in a task, not handed over
            nesting.owner = nesting.tracer  # spans open inline on its parent again

    def abort(self, description: str, restore: bool) -> None:
        """End a span ``open`` started with an ERROR status ``description`` (SIGTERM); restore
        the context only when ``restore`` (the span's own thread). Never raises."""
        nesting = self._state
        if nesting is None:
            return
        self._end = None
        self._state = None
        nesting.top = self._parent
        try:
            if nesting.root is self:
                nesting.owner = None
                if restore:
                    nesting.tracer.detach(nesting.token)
        except Exception:
            pass
        try:
            self.set_status(Status(StatusCode.ERROR, description))
            self._end = _time_ns()
            nesting.recorder.push(self)
        except Exception:
            warn_once(self._name, "ending the span")

    def hand_over(self) -> None:
        """The span is handed over to a stream (``_streams.stream``): until it leaves its
        nesting, spans opened on its thread take the nesting's general path."""
        nesting = self._state
        if nesting is not None:
            nesting.owner = None

    def _escaping(self) -> None:
        """At the end of a span ``open`` started while an exception is being handled: record it,
        unless it was already being handled when the span began."""
        self._end = None  # still recording (the exception's event and status)
        error = exception()
        try:
            handled = self._handled
        except AttributeError:  # nothing was being handled at the start
            handled = None
        if error is not None and error is not handled:
            try:
                self._record_error(error)
            except Exception:  # a RecursionError at the limit: the span still ends, without it
                pass

    def _record_error(self, error: BaseException) -> None:
        try:
            self.record_exception(error)
            self.set_status(Status(StatusCode.ERROR, type(error).__name__))
        except Exception:
            if not _is_finalizing():
                warn_once(self._name, "recording the exception")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end()

    def __repr__(self) -> str:
        return f"LeanSpan({self._name!r})"


class _More:
    """A LeanSpan's events, links and status: what few spans have (one slot, None in the rest)."""

    __slots__ = ("events", "links", "status")

    def __init__(self) -> None:
        self.events: list[tuple[str, Any, int]] | None = None
        self.links: list[tuple[Any, Any]] | None = None
        self.status: Any = None


if SpanBase is not object:
    SpanBase.register(LeanSpan)


def new_span(
    recorder: LeanRecorder,
    name: str,
    parent: Any,  # a LeanSpan, a SpanContext or None
    trace: tuple[int, int, Any],  # trace id, trace flags, trace state
    extra: dict[str, Any] | None,
    start: int,
    span_id: int = 0,  # 0: drawn on first use
) -> LeanSpan:
    """A started LeanSpan, as the API's ``start_span`` starts one (``LeanTracer.open`` makes its
    children inline, with what a span on a stack sets)."""
    span = LeanSpan()
    span._recorder = recorder
    span._name = name
    span._parent = parent
    span._trace = trace
    span._extra = extra
    span._id = span_id
    span._end = None
    span._more = None
    span._state = None
    span._start = start
    return span


def _leave_root(nesting: _Nesting, span: LeanSpan, log_at_exit: bool = False) -> None:
    """The outermost span of ``nesting`` leaves it: no span opens inline in it any more, and the
    context it set is restored. Never raises."""
    nesting.owner = None
    try:
        nesting.tracer.detach(nesting.token)
    except Exception:
        try:
            if log_at_exit or not _is_finalizing():
                warn_once(span._name, "restoring the context")
        except Exception:  # logging at the recursion limit
            pass


def fits(capacity: int, batch_size: int) -> list[bool]:
    """By a buffer's length: whether a span ``end`` appends goes in with no more to do (the
    buffer holds fewer than ``capacity`` and the span does not fill a batch, which wakes the
    export thread). One list per setting (a nesting holds it: one index per span)."""
    key = (capacity, batch_size)
    found = _FITS.get(key)
    if found is None:
        size = min(capacity, _FITS_MAX) + 1  # past it: ``end`` checks without the table
        found = _FITS[key] = [True] * size
        for n in (batch_size - 1, capacity):
            if 0 <= n < size:
                found[n] = False
    return found


_FITS: dict[tuple[int, int], list[bool]] = {}
_FITS_MAX = 4096  # a queue size of a million made a list of a million (8 MB, 85 ms)


def _queue(recorder: LeanRecorder, spans: Any, span: LeanSpan) -> None:
    """``recorder.push(span)`` for a span whose buffer's length ``fits`` does not allow: appended
    (the export thread woken when a batch is full) while the buffer holds fewer than its capacity
    (after shutdown too: kept, never exported, bounded), else dropped and counted."""
    if len(spans) < recorder.capacity:
        spans.append(span)
        if len(spans) == recorder.batch_size:
            recorder.wake.set()
    else:
        recorder.push(span)  # full: dropped and counted


def recycle(batch: list[Any]) -> None:
    """After ``batch`` was exported: each LeanSpan in it that nothing else references (its
    reference count: the batch's, the loop's, the call's: ``_alone``) is kept for
    ``LeanTracer.open`` to start again. A training thread then allocates no span (and the
    collector, which runs on whichever thread allocates, seldom runs there). Its parent,
    attributes, events, links and status are released here (children come before their parents
    in a batch: a parent is free once they are) and its id set to 0 (not drawn); the rest of what
    it held is replaced when it starts again (``get_span_context`` never returns the context of
    its past life: that context's span id differs). Never raises."""
    free = _FREE
    if len(free) < _FREE_MAX:
        alone = _ALONE
        keep = free.append
        for span in batch:
            if type(span) is LeanSpan:
                span._parent = span._extra = span._more = None
                if _getrefcount(span) == alone:
                    span._id = 0  # as open() starts a span: what a new one is set to
                    keep(span)


def _alone() -> int:
    """What ``recycle`` reads as the reference count of a span only its batch holds (the
    interpreter's own way of counting the loop's reference), found the way recycle reads it;
    0 (nothing recycled) unless a span held elsewhere reads one more."""
    batch = [LeanSpan(), LeanSpan()]
    held = batch[1]
    counts = []
    for span in batch:
        if type(span) is LeanSpan:
            counts.append(_getrefcount(span))
    del held
    alone, other = counts
    return alone if other == alone + 1 else 0


_ALONE = _alone()


def _unwind(stack: list[Any], span: LeanSpan) -> None:
    """End the spans above ``span`` on ``stack`` (left open by an exception), innermost first,
    and take ``span`` off it (not there: aborted meanwhile, nothing to do)."""
    if any(s is span for s in stack):
        while stack[-1] is not span:
            stack.pop().close()
        stack.pop()


def _after_fork_in_child() -> None:
    global _ID_LOCK
    _ID_LOCK = threading.Lock()  # the export thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
