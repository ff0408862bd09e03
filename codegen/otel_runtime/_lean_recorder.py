"""The recorder of the lean recording path: ended spans buffered per thread (``_batching``'s
queue) and the export thread that turns them into what the exporter takes. Built by
``_lean_install.install`` only.

What a backend receives is what the SDK path sends: names, parents, attributes (validated and
limited by the SDK's ``BoundedAttributes`` with the SDK's ``SpanLimits``), events (exceptions with
the SDK's attributes), links, status, kind, resource, scope, times. Through an OTLP/HTTP exporter
the recorder writes the request's bytes itself (``_otlp``); through any other, it makes the SDK's
``ReadableSpan`` objects (``materialize``). The span id (when nobody asked for it before), the
span group attributes, attribute validation and limits and the encoding are the export thread's
work, never the training thread's.

The recorder is its provider's one span processor, so the SDK spans of the same provider (the
lifecycle spans, a sampled-out parent's children) reach the same buffers through ``on_end``. A
borrowed exporter (a provider the program or the distro set, ``_lean_install``) is driven by
that provider's own processor too: every send holds ``exporter_lock``, and shutting the recorder
down leaves the exporter to the provider.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from . import _otlp
from ._batching import BatchQueue
from ._lean_span import LeanSpan, recycle
from ._state import log_once
from ._version import SCHEMA_URL, SCOPE, VERSION

try:  # the API only: the SDK is imported when a recorder is built (it may be missing)
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError:  # opentelemetry is optional: without it nothing here is used
    pass

# Attribute value types the SDK's validation keeps as they are.
_PLAIN = frozenset((str, bool, int, float))


class LeanRecorder(BatchQueue):
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
        # set by install() for a borrowed exporter: gives it back (the recorder's thread finished)
        self.release: Callable[[LeanRecorder, bool], None] | None = None
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
        super().__init__(
            max_queue_size, max_export_batch_size, schedule_delay_millis, export_timeout_millis
        )

    # -- the SpanProcessor interface (the SDK spans of the same provider)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing to do when an SDK span starts."""

    def _on_ending(self, span: Any) -> None:
        """Nothing to do before an SDK span ends."""

    def on_end(self, span: Any) -> None:
        """Queue an ended SDK span of the same provider."""
        self.push(span)

    # -- the export thread (and a flushing one)

    def _close(self, finished: bool) -> None:
        """Shut the exporter down; a borrowed one is the provider's: given back, not shut."""
        if self.borrowed:
            if self.release is not None:
                self.release(self, finished)  # when not finished, its last send needs the lock
            return
        try:
            self.exporter.shutdown()
        except Exception:
            log_once(
                "lean-exporter-shutdown", "shutting the span exporter down failed", exc_info=True
            )

    def _forked(self) -> None:
        self.exporter_lock = threading.Lock()  # the parent's thread may have held it
        if self.borrowed and self.release is not None:
            self.release(self, True)

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
        """Encode ``batch`` as one OTLP request (``_otlp``: its span ids drawn there) and send
        it."""
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
        recycle(batch)  # the spans nothing else references: started again by the training thread

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
