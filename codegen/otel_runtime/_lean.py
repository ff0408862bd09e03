"""The lean recording path: spans the runtime records into its own provider, kept as plain records
on the training thread and turned into SDK ``ReadableSpan`` objects on the export thread.

Used only when the runtime builds the providers itself (no program- or distro-set global tracer
provider, or ``MEGATRON_OTEL_OWN_PROVIDERS=1``) with the default sampler; a provider the program
sets gets the SDK path, as before. On the training thread a span costs: its id (the per-process
generator of ``_ids``), two ``time.time_ns()`` readings, the parent read from the current context,
the attributes its call site evaluates (a dict, not validated here), a context attach/detach so
that the span is the current one, and an append to this thread's buffer. The span group
attribute, attribute validation and limits, ``SpanContext``/``ReadableSpan`` objects and the OTLP
encoding are the export thread's work.

What a backend receives is what the SDK path sends: names, parents, attributes (validated and
limited by the SDK's ``BoundedAttributes`` with the SDK's ``SpanLimits``), events (exceptions with
the SDK's attributes), links, status, kind, resource, scope, times. A ``LeanSpan`` is a complete
``opentelemetry.trace.Span``: code that reads the current span inside a taxonomy span (a foreign
tracer's ``start_span``, ``set_current_attributes``, ``stamp``) sees it and parents to it; a
taxonomy span started inside a foreign span parents to that span (and inherits its trace state).
A child of a sampled-out foreign parent is recorded through the SDK tracer (the sampler decides).

The buffers are bounded (``span_queue_size`` ended spans per thread; a span ended while its
thread's buffer is full is dropped and counted, as the batch processor does), the export thread
sends batches of ``span_batch_size`` every ``span_schedule_delay`` or as soon as a batch is full,
``force_flush``/``shutdown`` take timeouts, and a forked child drops what its parent had buffered.
Spans of the SDK tracer through the same provider (the lifecycle spans, a sampled-out parent's
children) reach the same buffers as the processor's ``on_end``.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import traceback
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from . import _ids
from ._state import LOG, log_once
from ._version import SCHEMA_URL, SCOPE, VERSION

try:  # the API only: the SDK is imported when a recorder is installed (it may be missing)
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError:  # opentelemetry is optional: without it nothing here is used
    _SpanBase: Any = object
    _TracerBase: Any = object
else:
    _SpanBase = otel_trace.Span
    _TracerBase = otel_trace.Tracer

# False: the runtime's own provider records through the SDK path too (the benchmarks flip it).
ALLOWED = True
_SAMPLED = 0x01
_RANDOM_TRACE_ID = 0x02
_RECORDERS: weakref.WeakSet[LeanRecorder] = weakref.WeakSet()
# The runtime's own TracerProviders that record lean -> their recorder.
_BY_PROVIDER: weakref.WeakKeyDictionary[Any, LeanRecorder] = weakref.WeakKeyDictionary()
_time_ns = time.time_ns
# Attribute value types the SDK's validation keeps as they are.
_PLAIN = frozenset((str, bool, int, float))


def usable(provider: Any) -> bool:
    """Whether spans of ``provider`` (an SDK TracerProvider the runtime built) may record lean:
    the lean path is allowed and the provider samples everything its parents sample."""
    if not ALLOWED:
        return False
    sampler = getattr(provider, "sampler", None)
    try:
        from opentelemetry.sdk.trace import sampling
    except ImportError:
        return False

    return sampler is sampling.DEFAULT_ON or sampler is sampling.ALWAYS_ON


class LeanSpan(_SpanBase):  # type: ignore[misc]  # the API's Span when installed
    """One span recorded on the lean path: what the training thread knows, nothing more."""

    __slots__ = (
        "_context",
        "_end",
        "_events",
        "_extra",
        "_flags",
        "_links",
        "_name",
        "_parent",
        "_recorder",
        "_start",
        "_status",
        "_trace_state",
        "span_id",
        "trace_id",
    )

    def __init__(
        self,
        recorder: LeanRecorder,
        name: str,
        trace_id: int,
        parent: Any,  # a LeanSpan, a SpanContext or None
        flags: int,
        trace_state: Any,
        extra: dict[str, Any] | None,
        start: int,
        span_id: int,
    ) -> None:
        self._recorder = recorder
        self._name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self._parent = parent
        self._flags = flags
        self._trace_state = trace_state
        self._extra = extra
        self._start = start
        self._end: int | None = None
        self._status: Any = None
        self._events: list[tuple[str, Any, int]] | None = None
        self._links: list[Any] | None = None
        self._context: Any = None

    # -- the opentelemetry.trace.Span interface

    def get_span_context(self) -> SpanContext:
        """This span's SpanContext (built on first use)."""
        context: SpanContext | None = self._context
        if context is None:
            context = self._context = SpanContext(
                self.trace_id,
                self.span_id,
                is_remote=False,
                trace_flags=TraceFlags(self._flags),
                trace_state=self._trace_state,
            )
        return context

    def is_recording(self) -> bool:
        """True until the span ends."""
        return self._end is None

    def set_attribute(self, key: str, value: Any) -> None:
        """Set one attribute (validated on export, as the SDK validates it)."""
        if self._end is None:
            if self._extra is None:
                self._extra = {}
            self._extra[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Set attributes (validated on export)."""
        if self._end is None:
            if self._extra is None:
                self._extra = dict(attributes)
            else:
                self._extra.update(attributes)

    def add_event(
        self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None
    ) -> None:
        """Add an event (its attributes validated on export)."""
        if self._end is None:
            if self._events is None:
                self._events = []
            self._events.append((name, attributes, _time_ns() if timestamp is None else timestamp))

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        """Link to ``context`` (a valid one)."""
        if self._end is None and context is not None and context.is_valid:
            if self._links is None:
                self._links = []
            self._links.append((context, attributes))

    def update_name(self, name: str) -> None:
        """Rename the span."""
        if self._end is None:
            self._name = name

    def set_status(self, status: Any, description: str | None = None) -> None:
        """As the SDK's span: an OK status is final, UNSET is ignored."""
        if self._end is not None:
            return
        current = self._status
        if current is not None and current.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self._status = status
        elif isinstance(status, StatusCode) and status is not StatusCode.UNSET:
            self._status = Status(status, description)

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
        """End the span and queue it for export; a second call does nothing."""
        if self._end is not None:
            return
        self._end = _time_ns() if end_time is None else end_time
        self._recorder.push(self)

    def __repr__(self) -> str:
        return f"LeanSpan({self._name!r}, span_id={self.span_id:016x})"


class LeanTracer(_TracerBase):  # type: ignore[misc]  # the API's Tracer when installed
    """The runtime's tracer on the lean path: ``LeanSpan`` objects whose parent is the current span.

    ``sdk_tracer`` (the same provider's SDK tracer) records what the lean path does not: children
    of a sampled-out parent.

    Ids come from ``span_id``/``trace_id`` (the per-process generator of ``_ids``; ``choose_ids``
    swaps in a ``_ranks.ChosenIds``, which hands out the ids chosen for this thread's next span).
    """

    def __init__(self, recorder: LeanRecorder, sdk_tracer: Any) -> None:
        self.recorder = recorder
        self.sdk_tracer = sdk_tracer
        self.span_id: Any = _ids.span_id
        self.trace_id: Any = _ids.trace_id

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
        parent = otel_trace.get_current_span(context)
        if type(parent) is LeanSpan:
            span = LeanSpan(
                self.recorder,
                name,
                parent.trace_id,
                parent,
                parent._flags,
                parent._trace_state,
                None if attributes is None else dict(attributes),
                _time_ns() if start_time is None else start_time,
                self.span_id(),
            )
        else:
            parent_context: SpanContext | None = parent.get_span_context()
            if parent_context is not None and parent_context.is_valid:
                if not parent_context.trace_flags.sampled:  # the sampler's decision
                    return self.sdk_tracer.start_span(
                        name, context, SpanKind.INTERNAL, attributes, links, start_time
                    )
                trace_id = parent_context.trace_id
                flags = _SAMPLED | (parent_context.trace_flags & _RANDOM_TRACE_ID)
                trace_state = parent_context.trace_state
            else:
                parent_context = None
                trace_id = self.trace_id()
                flags = _SAMPLED | _RANDOM_TRACE_ID
                trace_state = None
            span = LeanSpan(
                self.recorder,
                name,
                trace_id,
                parent_context,
                flags,
                trace_state,
                None if attributes is None else dict(attributes),
                _time_ns() if start_time is None else start_time,
                self.span_id(),
            )
        if links:
            for link in links:
                span.add_link(link.context, link.attributes)
        return span

    def start_fast(self, name: str, extra: Mapping[str, Any] | None, trace_id: int = 0) -> Any:
        """``start_span(name)`` for the runtime's statement sites: ``extra`` is the call site's
        evaluated attributes, kept as given (the span group attributes are added on export); a
        root span goes in trace ``trace_id`` when it is set (the run's shared trace, ``_ranks``).
        A child of a sampled-out foreign span is left to the SDK tracer (its sampler decides)."""
        if extra is not None and type(extra) is not dict:
            extra = dict(extra)
        parent = otel_trace.get_current_span()
        if type(parent) is LeanSpan:
            return LeanSpan(
                self.recorder,
                name,
                parent.trace_id,
                parent,
                parent._flags,
                parent._trace_state,
                extra,
                _time_ns(),
                self.span_id(),
            )
        parent_context = parent.get_span_context()
        if not parent_context.is_valid:
            return LeanSpan(
                self.recorder,
                name,
                trace_id or self.trace_id(),
                None,
                _SAMPLED | _RANDOM_TRACE_ID,
                None,
                extra,
                _time_ns(),
                self.span_id(),
            )
        if not parent_context.trace_flags.sampled:
            values = {**self.recorder.base.get(name, {}), **(extra or {})}
            return self.sdk_tracer.start_span(name, attributes=values)
        return LeanSpan(
            self.recorder,
            name,
            parent_context.trace_id,
            parent_context,
            _SAMPLED | (parent_context.trace_flags & _RANDOM_TRACE_ID),
            parent_context.trace_state,
            extra,
            _time_ns(),
            self.span_id(),
        )

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


class _Buffer(threading.local):
    """This thread's buffer of ended spans (registered with its recorder on first use)."""

    def __init__(self, recorder: LeanRecorder) -> None:
        super().__init__()
        self.spans: collections.deque[Any] = collections.deque()
        with recorder.lock:
            recorder.buffers.append(self.spans)


class LeanRecorder:
    """Per-thread buffers of ended spans and the thread that exports them; the provider's one span
    processor (so the SDK spans of the same provider are exported with the lean ones). Built by
    ``install()`` only, after the SDK imported (``_sdk``)."""

    def __init__(
        self,
        exporter: Any,
        resource: Any,
        base_attributes: Mapping[str, Mapping[str, Any]],
        *,
        max_queue_size: int,
        max_export_batch_size: int,
        schedule_delay_millis: float,
        export_timeout_millis: float,
    ) -> None:
        self.exporter = exporter
        self.resource = resource
        self.base = base_attributes
        sdk = self.sdk = _sdk()
        self.scope = sdk.InstrumentationScope(SCOPE, VERSION, SCHEMA_URL, None)  # as _spans.select
        self.limits = sdk.SpanLimits()
        self.capacity = int(max_queue_size)
        self.batch_size = int(max_export_batch_size)
        self.delay = float(schedule_delay_millis) / 1000
        self.export_timeout = float(export_timeout_millis) / 1000
        self.lock = threading.Lock()
        self.export_lock = threading.Lock()
        self.buffers: list[collections.deque[Any]] = []
        self.local = _Buffer(self)  # its __init__ runs again in each thread that uses it
        self.wake = threading.Event()
        self.done = False
        self.dropped = 0
        self.failed = 0
        self.in_flight = 0
        self.exported = 0
        self._reported = False
        self.thread: threading.Thread | None = threading.Thread(
            target=self._run, name="megatron-otel-export", daemon=True
        )
        self.thread.start()
        _RECORDERS.add(self)

    # -- the training thread

    def push(self, span: Any) -> None:
        """Queue an ended span (a LeanSpan or an SDK ReadableSpan); drop and count it when this
        thread's buffer is full. Never raises."""
        if self.done:
            return
        spans = self.local.spans
        if len(spans) >= self.capacity:
            self.dropped += 1
            if self.dropped == 1:
                LOG.warning(
                    "telemetry: the span queue is full (%d spans): spans are dropped until the "
                    "exporter catches up (the collector is slow or unreachable); the number "
                    "dropped is logged at shutdown",
                    self.capacity,
                )
            return
        spans.append(span)
        if len(spans) == self.batch_size:
            self.wake.set()

    # -- the SpanProcessor interface (the SDK spans of the same provider)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing to do when an SDK span starts."""

    def _on_ending(self, span: Any) -> None:
        """Nothing to do before an SDK span ends."""

    def on_end(self, span: Any) -> None:
        """Queue an ended SDK span of the same provider."""
        self.push(span)

    def queued(self) -> int:
        """How many ended spans wait for export, in all buffers."""
        return sum(len(b) for b in list(self.buffers))

    def force_flush(self, timeout_millis: float = 30000) -> bool:
        """Export everything buffered now, for at most ``timeout_millis``."""
        return self._drain(time.monotonic() + max(0.0, timeout_millis) / 1000)

    def shutdown(self, timeout_millis: float | None = None) -> None:
        """Export what is buffered within ``timeout_millis`` (default: the export timeout),
        stop the export thread, shut the exporter down. Later spans are ignored; a second call
        does nothing."""
        if self.done:
            return
        timeout = self.export_timeout
        if timeout_millis is not None:
            timeout = max(0.0, timeout_millis) / 1000
        deadline = time.monotonic() + timeout
        self.done = True
        self.wake.set()
        thread, self.thread = self.thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
        try:
            self.exporter.shutdown()
        except Exception:
            log_once(
                "lean-exporter-shutdown", "shutting the span exporter down failed", exc_info=True
            )

    def report(self, timeout: float) -> None:
        """Log, once, how many spans were not exported and why."""
        if self._reported:
            return
        self._reported = True
        left = self.queued() + self.in_flight
        if self.dropped or self.failed or left:
            LOG.warning(
                "telemetry: %d spans dropped while the span queue was full, %d lost in failed "
                "exports, %d still queued when the flush timeout (%.1f s) ran out",
                self.dropped,
                self.failed,
                left,
                timeout,
            )

    # -- the export thread

    def _run(self) -> None:
        try:
            while not self.done:
                self.wake.wait(self.delay)
                self.wake.clear()
                self._drain(None)
            # shut down: what is left, until the deadline the shutdown set (the join's timeout)
            self._drain(time.monotonic() + self.export_timeout)
        except Exception:  # never expected; the spans then wait for a flush, bounded, counted
            log_once("lean-thread", "the span export thread stopped", exc_info=True)

    def _drain(self, deadline: float | None) -> bool:
        """Export every buffered span, a batch at a time; False when ``deadline`` passed first."""
        with self.export_lock:
            while True:
                batch = self._take()
                if not batch:
                    return True
                if deadline is not None and time.monotonic() > deadline:
                    self._put_back(batch)
                    return False
                self._export(batch)

    def _take(self) -> list[Any]:
        batch: list[Any] = []
        for spans in list(self.buffers):
            pop = spans.popleft
            while spans and len(batch) < self.batch_size:
                batch.append(pop())
            if len(batch) >= self.batch_size:
                break
        return batch

    def _put_back(self, batch: list[Any]) -> None:
        if self.buffers:
            self.buffers[0].extendleft(reversed(batch))

    def _export(self, batch: list[Any]) -> None:
        readable = []
        for span in batch:
            try:
                readable.append(self.materialize(span) if type(span) is LeanSpan else span)
            except Exception:
                self.failed += 1
                log_once("lean-materialize", "converting a span for export failed", exc_info=True)
        self.in_flight = len(readable)
        result = None
        try:
            result = self.exporter.export(readable)
        except Exception:
            log_once("lean-export", "exporting spans failed", exc_info=True)
        finally:
            if result != self.sdk.SpanExportResult.SUCCESS:
                self.failed += len(readable)
            else:
                self.exported += len(readable)
            self.in_flight = 0

    def materialize(self, span: LeanSpan) -> Any:
        """The SDK ``ReadableSpan`` a LeanSpan stands for, as the SDK path would have made it."""
        limits, sdk = self.limits, self.sdk
        BoundedAttributes, BoundedList = sdk.BoundedAttributes, sdk.BoundedList
        values: dict[str, Any] = dict(self.base.get(span._name, ()))
        if span._extra:
            values.update(span._extra)
        attributes: Any = values  # plain values within the limits: what validation would keep
        if (
            len(values) > limits.max_span_attributes
            or limits.max_span_attribute_length is not None
            or not all(type(v) in _PLAIN for v in values.values())
        ):
            attributes = BoundedAttributes(
                limits.max_span_attributes,
                values,
                immutable=True,
                max_value_len=limits.max_span_attribute_length,
            )
        events: Any = ()
        if span._events:
            events = BoundedList(limits.max_events)
            for name, event_attributes, timestamp in span._events:
                bounded = BoundedAttributes(
                    limits.max_event_attributes,
                    event_attributes,
                    max_value_len=limits.max_attribute_length,
                    immutable=True,
                )
                events.append(sdk.Event(name=name, attributes=bounded, timestamp=timestamp))
        links: Any = ()
        if span._links:
            links = BoundedList(limits.max_links)
            for context, link_attributes in span._links:
                bounded = BoundedAttributes(
                    limits.max_link_attributes,
                    link_attributes,
                    max_value_len=limits.max_attribute_length,
                    immutable=True,
                )
                links.append(Link(context, bounded))
        parent = span._parent
        if type(parent) is LeanSpan:
            parent = parent.get_span_context()
        return sdk.ReadableSpan(
            name=span._name,
            context=span.get_span_context(),
            parent=parent,
            resource=self.resource,
            attributes=attributes,
            events=events,
            links=links,
            kind=SpanKind.INTERNAL,
            status=span._status or Status(StatusCode.UNSET),
            start_time=span._start,
            end_time=span._end,
            instrumentation_scope=self.scope,
        )


def _sdk() -> Any:
    """The SDK names a recorder uses, imported on first use (the SDK is optional)."""
    import types

    from opentelemetry.attributes import BoundedAttributes
    from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.sdk.util import BoundedList
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    return types.SimpleNamespace(
        BoundedAttributes=BoundedAttributes,
        BoundedList=BoundedList,
        Event=Event,
        InstrumentationScope=InstrumentationScope,
        ReadableSpan=ReadableSpan,
        SpanExportResult=SpanExportResult,
        SpanLimits=SpanLimits,
    )


def _after_fork_in_child() -> None:
    """A forked child never exports its parent's spans: every recorder is emptied and stopped."""
    try:
        for recorder in list(_RECORDERS):
            recorder.done = True
            recorder.thread = None
            for spans in recorder.buffers:
                spans.clear()
            recorder.export_lock = threading.Lock()
            recorder.lock = threading.Lock()
    except Exception:
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def install(provider: Any, exporter: Any, limits: Any) -> LeanRecorder:
    """Make ``provider`` (a TracerProvider the runtime built) record lean, exporting through
    ``exporter`` within the run's export limits (``ExportLimits``); the recorder is its
    processor."""
    from ._spans import SPAN_ATTRIBUTES

    recorder = LeanRecorder(
        exporter,
        provider.resource,
        SPAN_ATTRIBUTES,
        max_queue_size=limits.span_queue_size,
        max_export_batch_size=limits.span_batch_size,
        schedule_delay_millis=limits.span_schedule_delay_ms,
        export_timeout_millis=limits.export_timeout * 1000,
    )
    provider.add_span_processor(recorder)
    _BY_PROVIDER[provider] = recorder
    return recorder


def tracer(provider: Any, sdk_tracer: Any) -> Any:
    """The tracer spans of ``provider`` record with: a LeanTracer when the runtime made
    ``provider`` record lean, else ``sdk_tracer`` (the SDK path)."""
    try:
        recorder = _BY_PROVIDER.get(provider) if provider is not None else None
    except TypeError:  # not weakly referenceable: not ours
        recorder = None
    return sdk_tracer if recorder is None else LeanTracer(recorder, sdk_tracer)
