"""The lean recording path: spans the runtime records into its own provider, kept as plain records
on the training thread and turned into SDK ``ReadableSpan`` objects on the export thread.

Used when the runtime builds the providers itself (no program- or distro-set global tracer
provider, or ``MEGATRON_OTEL_OWN_PROVIDERS=1``) with the default sampler, and on a provider the
program or ``opentelemetry-instrument`` set up the standard way (``borrowable``: the rule), whose
exporter it then shares (``share_exporter``); any other provider gets the SDK path. On the
training thread a statement site's span (``LeanTracer.open``) costs: the call site's attributes
evaluated (a dict, not validated here), the current context read from the API's context variable,
one ``LeanSpan`` (name, parent, the parent's trace, start time) pushed on the thread's open-span
stack; at its end the pop, the end
time and an append to this thread's buffer. No context is made per span: the outermost span of a
nesting sets one ``_LeanContext``, whose current span is looked up on the stack when someone asks
(the exact rule is ``_LeanContext``'s). The span id (drawn on first use, normally by the export
thread), the span group attribute, attribute validation and limits, ``SpanContext`` and
``ReadableSpan`` objects and the OTLP encoding are the export thread's work.

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
import contextvars
import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import _ids, _otlp
from ._state import LOG, PROCESS, PUBLISHED, log_once, task_stack, warn_once
from ._version import SCHEMA_URL, SCOPE, VERSION

if TYPE_CHECKING:
    from typing import Self

    from ._state import Run

try:  # the API only: the SDK is imported when a recorder is installed (it may be missing)
    from opentelemetry import trace as otel_trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError:  # opentelemetry is optional: without it nothing here is used
    _SpanBase: Any = object
    _TracerBase: Any = object
    _ContextBase: Any = dict
else:
    _SpanBase = otel_trace.Span
    _TracerBase = otel_trace.Tracer
    _ContextBase = Context

# False: the runtime's own provider records through the SDK path too (the benchmarks flip it).
ALLOWED = True
_SAMPLED = 0x01
_RANDOM_TRACE_ID = 0x02
_RECORDERS: weakref.WeakSet[LeanRecorder] = weakref.WeakSet()
# The runtime's own TracerProviders that record lean -> their recorder.
_BY_PROVIDER: weakref.WeakKeyDictionary[Any, LeanRecorder] = weakref.WeakKeyDictionary()
_time_ns = time.time_ns
_exc_info = sys.exc_info
_is_finalizing = sys.is_finalizing
# The exception being handled (sys.exception, Python >= 3.11: no tuple built per call).
_exception: Callable[[], BaseException | None] = getattr(sys, "exception", lambda: _exc_info()[1])
# Held while a LeanSpan's id is drawn (on first use, by the training or the export thread).
_ID_LOCK = threading.Lock()
# Attribute value types the SDK's validation keeps as they are.
_PLAIN = frozenset((str, bool, int, float))
_get_ident = threading.get_ident
# asyncio's _get_running_loop once asyncio is imported (no loop can run before): a span opened
# while a task runs never joins the nesting of the code that started the loop (_state.task_stack)
_running_loop: Callable[[], Any] | None = None


def _watch_loops() -> None:
    global _running_loop
    _running_loop = sys.modules["asyncio"]._get_running_loop


def usable(provider: Any, recording: str = "auto") -> bool:
    """Whether spans of ``provider`` (an SDK TracerProvider the runtime built) may record lean:
    the lean path is allowed (``recording`` is not ``sdk``) and the provider samples everything
    its parents sample (``recording`` ``lean``: whatever its sampler)."""
    if not ALLOWED or recording == "sdk":
        return False
    sampler = getattr(provider, "sampler", None)
    try:
        from opentelemetry.sdk.trace import sampling
    except ImportError:
        return False

    return recording == "lean" or sampler is sampling.DEFAULT_ON or sampler is sampling.ALWAYS_ON


# The exporters opentelemetry-instrument's configurator builds from OTEL_TRACES_EXPORTER that the
# lean path sends through unasked (``recording`` auto): (module prefix, class name).
_STANDARD_EXPORTERS = (
    ("opentelemetry.exporter.otlp.proto.http", "OTLPSpanExporter"),
    ("opentelemetry.exporter.otlp.proto.grpc", "OTLPSpanExporter"),
    ("opentelemetry.sdk.trace.export", "ConsoleSpanExporter"),
)


def borrowable(provider: Any, recording: str = "auto") -> tuple[Any, Any] | str:
    """``(exporter, span limits)`` when spans of ``provider``, a TracerProvider the program or
    the OpenTelemetry distro set (``opentelemetry-instrument``), may record lean and be sent
    through ``exporter``, the provider's own; else why they take the SDK path.

    With ``recording`` auto: the SDK's own ``TracerProvider`` (not a subclass), not disabled, with
    the default tracer configuration, the default sampler (``parentbased_always_on``, or
    ``always_on``), the default id generator, and one span processor, the SDK's own
    ``BatchSpanProcessor`` or ``SimpleSpanProcessor`` (not a subclass), over an OTLP (HTTP or
    gRPC) or console span exporter: what the distro builds from the ``OTEL_*`` variables. With
    ``lean``: the same, but any sampler, id generator and exporter. With ``sdk``: never.

    Anything else stays on the SDK path, since the lean path would change what it does: another
    processor sees each span start and end (to enrich, filter, redact or count spans: the lean
    path calls no processor per span); another sampler decides per span (no sampler runs per lean
    span); another id generator makes ids with a meaning (X-Ray's carry a time); another exporter
    may rely on the SDK's span objects or on being called by its processor alone."""
    if not ALLOWED or recording == "sdk":
        return "the SDK path is asked for" if recording == "sdk" else "the lean path is off"
    try:
        from opentelemetry.sdk import trace as sdk_trace
        from opentelemetry.sdk.trace import export as sdk_export
        from opentelemetry.sdk.trace import id_generator, sampling
    except ImportError:
        return "the OpenTelemetry SDK is not installed"
    if type(provider) is not sdk_trace.TracerProvider:
        return f"the provider is a {type(provider).__qualname__}, not the SDK's TracerProvider"
    if getattr(provider, "_disabled", False):
        return "the SDK is disabled (OTEL_SDK_DISABLED)"
    default_configurator = getattr(sdk_trace, "_default_tracer_configurator", None)
    if getattr(provider, "_tracer_configurator", default_configurator) is not default_configurator:
        return "the provider has a tracer configurator"
    if recording != "lean":
        sampler = getattr(provider, "sampler", None)
        if sampler is not sampling.DEFAULT_ON and sampler is not sampling.ALWAYS_ON:
            return f"the provider's sampler is {type(sampler).__name__} ({sampler!r})"
        if type(getattr(provider, "id_generator", None)) is not id_generator.RandomIdGenerator:
            return "the provider has another id generator"
    # The provider's processors: no public accessor (SDK 1.27-1.45 keep them here).
    active = getattr(provider, "_active_span_processor", None)
    processors = getattr(active, "_span_processors", None)
    multi = (sdk_trace.SynchronousMultiSpanProcessor, sdk_trace.ConcurrentMultiSpanProcessor)
    if type(active) not in multi or not isinstance(processors, tuple):
        return "the provider's span processors cannot be read"
    if len(processors) != 1:
        return f"the provider has {len(processors)} span processors, not one"
    (processor,) = processors
    if type(processor) not in (sdk_export.BatchSpanProcessor, sdk_export.SimpleSpanProcessor):
        return f"the provider's span processor is a {type(processor).__qualname__}"
    exporter = getattr(processor, "span_exporter", None)
    if exporter is None:
        return "the provider's span processor has no exporter"
    kind = type(exporter)
    standard = any(
        kind.__module__.startswith(module) and kind.__name__ == name
        for module, name in _STANDARD_EXPORTERS
    )
    if recording != "lean" and not standard:
        return f"the provider's exporter is a {kind.__qualname__}"
    limits = getattr(provider, "_span_limits", None)  # the provider's own (no public accessor)
    if not isinstance(limits, sdk_trace.SpanLimits):
        limits = sdk_trace.SpanLimits()  # what a provider built without limits has
    return exporter, limits


class LeanSpan:
    """One span recorded on the lean path: what the training thread knows, nothing more.
    Made by ``_lean_span`` (or inline, the same way), never with arguments: without an
    ``__init__`` making one costs least.

    An ``opentelemetry.trace.Span`` (registered as a virtual subclass: inheriting the API's class
    would give every span an attribute dictionary).

    ``_trace`` is ``(trace_id, trace flags, trace state)``, shared by every span of a trace
    (a child takes its parent's); the span id is drawn on first use (``span_id``): by the export
    thread, or by whoever reads the span's context first."""

    __slots__ = (
        "_context",
        "_end",
        "_events",
        "_extra",
        "_handled",
        "_id",
        "_links",
        "_name",
        "_parent",
        "_recorder",
        "_start",
        "_state",
        "_status",
        "_token",
        "_trace",
    )
    _recorder: LeanRecorder
    _name: str
    _parent: Any  # a LeanSpan, a SpanContext or None
    _trace: tuple[int, int, Any]  # trace id, trace flags, trace state (shared by a trace's spans)
    _extra: dict[str, Any] | None  # the attributes set (validated on export)
    _id: int  # 0 until drawn
    _start: int
    _end: int | None
    _status: Any
    _events: list[tuple[str, Any, int]] | None
    _links: list[Any] | None
    _context: Any
    # Set by LeanTracer.open for a span open on a thread's stack: its nesting (None once closed),
    # the context token the outermost span of a nesting restores at its end, the exception the
    # caller was already handling at the start (its end is not an error).
    _state: _Nesting | None
    _token: Any
    _handled: BaseException | None

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
        context: SpanContext | None = self._context
        if context is None:
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
        return self._end is None

    def set_attribute(self, key: str, value: Any) -> None:
        """Set one attribute (validated on export, as the SDK validates it)."""
        if self._end is None:
            if self._extra is None:
                self._extra = {}
            self._extra[key] = value

    def set_attributes(
        self, attributes: Mapping[str, Any] | Callable[[], Mapping[str, Any]]
    ) -> None:
        """Set attributes (validated on export). A call site passes a callable (as to
        ``_spans.StartedSpan.set_attributes``): it is evaluated here, and its failure logged once,
        never raised."""
        if self._end is not None:
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
        """End the span and queue it for export; a second call does nothing.

        A span ``LeanTracer.open`` started also leaves its thread's stack (spans opened after it
        and still open were left by an exception, as the "flat" form has no ``finally``: they are
        ended first, innermost first), stops being current and records an escaping exception.
        Never raises."""
        if self._end is not None:
            return
        nesting = self._state
        if nesting is None:  # a span of the API's start_span
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
        # close(), inline: the hot path of every span
        self._state = None
        nesting.top = self._parent
        if self._token is not None:
            try:
                nesting.tracer.detach(self._token)
            except Exception:
                try:
                    if not _is_finalizing():
                        warn_once(self._name, "restoring the context")
                except Exception:  # logging at the recursion limit
                    pass
        error = _exception()
        if error is not None and error is not self._handled:
            try:
                self._record_error(error)
            except Exception:  # a RecursionError at the limit: the span still ends, without it
                pass
        self._end = _time_ns() if end_time is None else end_time
        recorder = self._recorder
        spans = nesting.spans
        if len(spans) < recorder.capacity:  # after shutdown: kept, never exported, bounded
            spans.append(self)
            if len(spans) == recorder.batch_size:
                recorder.wake.set()
        else:
            recorder.push(self)  # full: dropped and counted

    def close(self) -> None:
        """End a span ``open`` started, leaving its thread's stack alone (``end`` without the
        pop). Never raises; nothing is logged after interpreter shutdown began (a ``__del__``
        at exit)."""
        nesting = self._state
        if nesting is None or self._end is not None:
            return
        self._state = None
        nesting.top = self._parent
        if self._token is not None:
            try:
                nesting.tracer.detach(self._token)
            except Exception:
                try:
                    if not _is_finalizing():
                        warn_once(self._name, "restoring the context")
                except Exception:  # logging at the recursion limit
                    pass
        error = _exception()
        if error is not None and error is not self._handled:
            try:
                self._record_error(error)
            except Exception:  # a RecursionError at the limit: the span still ends, without it
                pass
        self._end = _time_ns()
        self._recorder.push(self)

    def leave(self) -> None:
        """Stop being current and leave the open-span stack, without ending: the span was
        handed over to a stream (``_streams.stream``), which ends it. Never raises."""
        nesting = self._state
        if nesting is None or self._end is not None:
            return
        stack = nesting.stack
        if stack and stack[-1] is self:
            stack.pop()
        else:
            _unwind(stack, self)  # spans above it were left open by an exception: ended
        self._state = None
        nesting.top = self._parent
        if self._token is not None:
            try:
                nesting.tracer.detach(self._token)
            except Exception:
                warn_once(self._name, "restoring the context")

    def abort(self, description: str, restore: bool) -> None:
        """End a span ``open`` started with an ERROR status ``description`` (SIGTERM); restore
        the context only when ``restore`` (the span's own thread). Never raises."""
        nesting = self._state
        if nesting is None or self._end is not None:
            return
        self._state = None
        nesting.top = self._parent
        try:
            if restore and self._token is not None:
                nesting.tracer.detach(self._token)
        except Exception:
            pass
        try:
            self.set_status(Status(StatusCode.ERROR, description))
            self._end = _time_ns()
            self._recorder.push(self)
        except Exception:
            warn_once(self._name, "ending the span")

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


if _SpanBase is not object:
    _SpanBase.register(LeanSpan)


def _lean_span(
    recorder: LeanRecorder,
    name: str,
    parent: Any,  # a LeanSpan, a SpanContext or None
    trace: tuple[int, int, Any],  # trace id, trace flags, trace state
    extra: dict[str, Any] | None,
    start: int,
    span_id: int = 0,  # 0: drawn on first use
) -> LeanSpan:
    """A started LeanSpan (``LeanTracer.open`` makes its children inline, the same way)."""
    span = LeanSpan()
    span._recorder = recorder
    span._name = name
    span._parent = parent
    span._trace = trace
    span._extra = extra
    span._id = span_id
    span._end = None
    span._status = None
    span._events = None
    span._links = None
    span._context = None
    span._state = None
    span._token = None
    span._handled = None
    span._start = start
    return span


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
        self.current, self.attach, self.detach, self.key = _context_access()
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
        span = _lean_span(
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
            get_current = self.current  # an attribute, not a method: no method lookup
            current = get_current()
            if type(current) is _LeanContext and name not in self.transfers:
                nesting = current._nesting
                top = nesting.top
                if (
                    type(top) is LeanSpan
                    and top._state is nesting
                    and nesting.tracer is self
                    and nesting.ident == _get_ident()
                    and (_running_loop is None or _running_loop() is None)
                ):  # inside this thread's nesting, no asyncio task running: the common case
                    span = LeanSpan()
                    span._recorder = self.recorder
                    span._name = name
                    span._parent = top
                    span._trace = top._trace
                    span._extra = None if attributes is None else _evaluated(name, attributes)
                    span._id = 0
                    span._end = None
                    span._status = None
                    span._events = None
                    span._links = None
                    span._context = None
                    span._state = nesting
                    span._token = None
                    span._handled = _exception()
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
            if parent is not None and isinstance(parent, _SpanBase):  # no ABC check for a root
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
        span = _lean_span(
            self.recorder,
            name,
            parent,
            trace,
            None if attributes is None else _evaluated(name, attributes),
            _time_ns(),
        )
        in_task = task_stack(run)
        stack = run.open_spans.stack if in_task is None else in_task
        nesting = _Nesting(self, stack, self.recorder.local.spans, span)
        if in_task is not None:  # in an asyncio task each span sets its own context (never inline)
            nesting.ident = 0
        if _running_loop is None and "asyncio" in sys.modules:
            _watch_loops()
        state = _LeanContext(current, self.key, nesting)
        span._state = nesting
        span._handled = _exception()
        try:
            span._token = self.attach(state)
        except BaseException:
            span._state = None
            span.end()
            raise
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


def _unwind(stack: list[Any], span: LeanSpan) -> None:
    """End the spans above ``span`` on ``stack`` (left open by an exception), innermost first,
    and take ``span`` off it (not there: aborted meanwhile, nothing to do)."""
    if any(s is span for s in stack):
        while stack[-1] is not span:
            stack.pop().close()
        stack.pop()


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
    outermost (``root``) ends: the thread's stack and buffer, the innermost span open (``top``)."""

    __slots__ = ("ident", "root", "spans", "stack", "top", "tracer")

    def __init__(
        self, tracer: LeanTracer, stack: list[Any], spans: collections.deque[Any], root: LeanSpan
    ) -> None:
        self.tracer = tracer
        self.stack = stack  # the thread's open spans (the run's ``open_spans.stack``)
        self.spans = spans  # the thread's buffer of ended spans (the recorder's)
        self.root = root
        self.top: Any = root
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


def _name_of(span: Any) -> str:
    """A span's name, for a warning."""
    return str(getattr(span, "_name", None) or getattr(span, "name", "?"))


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
        limits: Any = None,
        borrowed: bool = False,
    ) -> None:
        self.exporter = exporter
        self.resource = resource
        self.base = base_attributes
        sdk = self.sdk = _sdk()
        self.scope = sdk.InstrumentationScope(SCOPE, VERSION, SCHEMA_URL, None)  # as _spans.select
        self.limits = sdk.SpanLimits() if limits is None else limits
        # A borrowed exporter (a provider the program or the distro set) is also driven by that
        # provider's own processor: ``share_exporter`` makes every call of its ``export`` take
        # ``exporter_lock``, as this recorder's sends do; it is never shut down here.
        self.borrowed = borrowed
        self.exporter_lock = threading.Lock()
        self.provider: Callable[[], Any] | None = None  # a weak reference, set by install()
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
        # OTLP/HTTP: the runtime writes the request's bytes itself (_otlp); else ReadableSpans
        self.send: Callable[[bytes], bool] | None = None
        self.encoder: Any = None
        try:
            self.send = _otlp.sender(exporter)
            if self.send is not None:
                self.encoder = _otlp.SpanEncoder(
                    resource, self.scope, base_attributes, self.limits, LeanSpan, self.materialize
                )
        except Exception:
            self.send = None
            log_once("lean-encoder", "the runtime's OTLP encoder is not usable", exc_info=True)
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
        if self.borrowed:
            provider = self.provider() if self.provider is not None else None
            if provider is not None and _BY_PROVIDER.get(provider) is self:
                del _BY_PROVIDER[provider]  # a later run decides afresh
            if thread is None or not thread.is_alive():  # else its last send still needs the lock
                unshare_exporter(self)
            return  # the exporter is the provider's: it shuts it down
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
                # woken by a full buffer: full batches only (what is left rides with the next
                # batch or goes when the delay runs out), as the SDK's batch processor exports
                full = self.wake.wait(self.delay)
                self.wake.clear()
                self._drain(None, full_only=full and not self.done)
            # shut down: what is left, until the deadline the shutdown set (the join's timeout)
            self._drain(time.monotonic() + self.export_timeout)
        except Exception:  # never expected; the spans then wait for a flush, bounded, counted
            log_once("lean-thread", "the span export thread stopped", exc_info=True)

    def _drain(self, deadline: float | None, full_only: bool = False) -> bool:
        """Export every buffered span (``full_only``: while a full batch is buffered), a batch at
        a time; False when ``deadline`` passed first."""
        with self.export_lock:
            while True:
                if full_only and self.queued() < self.batch_size:
                    return True
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
        if self.send is not None:
            self._send(batch, self.send)
            return
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
            result = self.exporter.export(readable)  # takes exporter_lock when borrowed
        except Exception:
            log_once("lean-export", "exporting spans failed", exc_info=True)
        finally:
            if result != self.sdk.SpanExportResult.SUCCESS:
                self.failed += len(readable)
            else:
                self.exported += len(readable)
            self.in_flight = 0

    def _send(self, batch: list[Any], send: Callable[[bytes], bool]) -> None:
        """Encode ``batch`` as one OTLP request (``_otlp``) and send it."""
        try:
            data, count, failed = self.encoder.encode(batch)
        except Exception:
            data, count, failed = b"", 0, len(batch)
        if failed:
            self.failed += failed
            log_once("lean-materialize", "converting a span for export failed")
        if not count:
            return
        self.in_flight = count
        sent = False
        try:
            if self.borrowed:
                with self.exporter_lock:  # the provider's processor exports through it too
                    sent = send(data)
            else:
                sent = send(data)
        except Exception:
            log_once("lean-export", "exporting spans failed", exc_info=True)
        finally:
            if sent:
                self.exported += count
            else:
                self.failed += count
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
            parent = parent.get_span_context()  # its id drawn now, if nobody asked before
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
    global _ID_LOCK
    try:
        _ID_LOCK = threading.Lock()  # the export thread may have held it at the fork
        for recorder in list(_RECORDERS):
            recorder.done = True
            recorder.thread = None
            for spans in recorder.buffers:
                spans.clear()
            recorder.export_lock = threading.Lock()
            recorder.lock = threading.Lock()
            recorder.exporter_lock = threading.Lock()  # the parent's thread may have held it
            if recorder.borrowed:
                unshare_exporter(recorder)
                provider = recorder.provider() if recorder.provider is not None else None
                if provider is not None and _BY_PROVIDER.get(provider) is recorder:
                    del _BY_PROVIDER[provider]
    except Exception:
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def install(
    provider: Any,
    exporter: Any,
    limits: Any,
    base_attributes: Mapping[str, Mapping[str, Any]],
    span_limits: Any = None,
    borrowed: bool = False,
) -> LeanRecorder:
    """Make ``provider`` record lean, exporting through ``exporter`` within the run's export
    limits (``ExportLimits``), every span of a name starting with that name's
    ``base_attributes``, attributes limited by ``span_limits`` (default: the SDK's defaults).

    A provider the runtime built: the recorder is its processor. A ``borrowed`` one (the
    program's or the distro's, ``borrowable``): its own processor stays and exports the SDK spans
    of the provider (the lifecycle spans, anyone else's); the recorder sends the lean spans through
    the same exporter, never at the same time as that processor (``share_exporter``), and leaves
    the exporter to the provider to shut down."""
    recorder = LeanRecorder(
        exporter,
        provider.resource,
        base_attributes,
        max_queue_size=limits.span_queue_size,
        max_export_batch_size=limits.span_batch_size,
        schedule_delay_millis=limits.span_schedule_delay_ms,
        export_timeout_millis=limits.export_timeout * 1000,
        limits=span_limits,
        borrowed=borrowed,
    )
    if borrowed:
        try:
            share_exporter(recorder)
        except Exception as error:  # its export cannot be wrapped: the thread stops, unused
            recorder.done = True
            recorder.wake.set()
            _RECORDERS.discard(recorder)
            name = type(exporter).__name__
            raise TypeError(f"the exporter {name} cannot be shared ({error})") from None
    else:
        provider.add_span_processor(recorder)
    _BY_PROVIDER[provider] = recorder
    recorder.provider = weakref.ref(provider)
    return recorder


def share_exporter(recorder: LeanRecorder) -> None:
    """Make every call of the borrowed exporter's ``export`` (its processor's, on that
    processor's thread, or on any thread for the simple processor) hold the recorder's
    ``exporter_lock``, which the recorder's own sends hold too: the exporter is never driven from
    two threads at once. The SpanExporter interface is ``export``, ``force_flush`` and
    ``shutdown``; only ``export`` sends (the OTLP exporters' ``force_flush`` sends nothing, and
    ``shutdown`` must not wait behind a send: it interrupts the exporter's retries)."""
    exporter = recorder.exporter
    original = exporter.export

    def export(spans: Sequence[Any]) -> Any:
        with recorder.exporter_lock:
            return original(spans)

    export.__wrapped__ = original  # type: ignore[attr-defined]
    exporter.export = export


def unshare_exporter(recorder: LeanRecorder) -> None:
    """Give the borrowed exporter its own ``export`` back (the recorder sends no more)."""
    try:
        if "export" in vars(recorder.exporter):
            del recorder.exporter.export
    except Exception:
        pass


def tracer(provider: Any, sdk_tracer: Any) -> Any:
    """The tracer spans of ``provider`` record with: a LeanTracer when the runtime made
    ``provider`` record lean, else ``sdk_tracer`` (the SDK path)."""
    try:
        recorder = _BY_PROVIDER.get(provider) if provider is not None else None
    except TypeError:  # not weakly referenceable: not ours
        recorder = None
    return sdk_tracer if recorder is None else LeanTracer(recorder, sdk_tracer)
