"""Export: the SDK providers, exporters, batch span processor and metric reader the runtime builds,
with the configured timeouts and queue limits; the bounded flush and shutdown; span accounting.

Nothing here runs on a training thread but ``on_end`` (a length check and a queue append): the
SDK's batch thread exports spans, the metric reader's thread exports metrics. When the collector is
down, slow or refusing:

- an export (the exporter's retries included) gives up after ``export_timeout`` seconds;
- at most ``span_queue_size`` ended spans wait in memory; a span ended while the queue is full is
  dropped and counted: logged once when the queue first fills, the totals once at shutdown;
- shutdown (the end of the run, interpreter exit) flushes and shuts the providers down within
  ``flush_timeout`` seconds in all, then gives up what is still queued; a flush on SIGTERM is
  bounded by its own timeout.

The bound at exit needs no new thread (Python 3.12 refuses to start one during interpreter exit):
the SDK's own batch and reader threads do the exporting, and shutting them down joins them for
at most the time left.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import _ids, _lean
from ._state import LOG, PROCESS, log_once

# Standard variables that give the OTLP exporters a timeout of their own (the SDK reads them).
_STANDARD_TIMEOUTS = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_{SIGNAL}_TIMEOUT")


def tracer_provider(settings: Any, resource: Any) -> tuple[Any, list[Any]]:
    """An SDK TracerProvider exporting through a bounded batch processor, and that processor
    (to shut down with a timeout: ``shutdown_providers``); None and [] without the SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    except ImportError:
        log_once("sdk", "opentelemetry-sdk is not installed: using the global providers")
        return None, []
    processors = []
    provider = TracerProvider(
        resource=resource, shutdown_on_exit=False, id_generator=_ids.generator()
    )
    if settings.exporter == "console":
        exporter = ConsoleSpanExporter()
    else:
        exporter = otlp_exporter(settings, "trace", "Span")
    if exporter is not None and _lean.usable(provider):
        # the lean path: the recorder is the provider's processor (see _lean)
        processors.append(_lean.install(provider, exporter, settings.export))
    elif exporter is not None:
        limits = settings.export
        processor = _processor_class()(
            exporter,
            max_queue_size=limits.span_queue_size,
            schedule_delay_millis=limits.span_schedule_delay_ms,
            max_export_batch_size=limits.span_batch_size,
            export_timeout_millis=limits.export_timeout * 1000,
        )
        provider.add_span_processor(processor)
        processors.append(processor)
    return provider, processors


def meter_provider(settings: Any, resource: Any) -> Any:
    """An SDK MeterProvider with a periodic reader at the configured interval; None without the
    SDK."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )
    except ImportError:
        log_once("sdk", "opentelemetry-sdk is not installed: using the global providers")
        return None
    if settings.exporter == "console":
        exporter = ConsoleMetricExporter()
    else:
        exporter = otlp_exporter(settings, "metric", "Metric")
    readers = []
    if exporter is not None:
        limits = settings.export
        readers.append(
            PeriodicExportingMetricReader(
                exporter,
                export_interval_millis=limits.metric_export_interval_ms,
                export_timeout_millis=limits.export_timeout * 1000,
            )
        )
    return MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)


def otlp_exporter(settings: Any, signal: str, kind: str) -> Any:
    """The OTLP exporter for ``signal``, over the protocol OTEL_EXPORTER_OTLP_*PROTOCOL names.

    Its timeout is ``export_timeout`` unless only a standard OTEL_EXPORTER_OTLP_*TIMEOUT is set.
    """
    if settings.exporter != "otlp":
        return None
    protocol = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}S_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"
    )
    order = ("http", "grpc") if protocol.startswith("http") else ("grpc", "http")
    options: dict[str, Any] = {}
    standard = [name.format(SIGNAL=signal.upper() + "S") for name in _STANDARD_TIMEOUTS]
    if settings.export.export_timeout_given or not any(os.environ.get(n) for n in standard):
        options["timeout"] = settings.export.export_timeout
    for transport in order:
        module = f"opentelemetry.exporter.otlp.proto.{transport}.{signal}_exporter"
        try:
            return getattr(importlib.import_module(module), f"OTLP{kind}Exporter")(**options)
        except ImportError:
            continue
        except Exception:
            log_once(f"otlp-{signal}", "creating the OTLP exporter failed", exc_info=True)
            return None
    log_once(
        f"otlp-{signal}",
        "no OTLP exporter installed (opentelemetry-exporter-otlp): %ss are not exported",
        signal,
    )
    return None


def shutdown_providers(
    owned: Sequence[Any], borrowed: Sequence[Any], processors: Sequence[Any], timeout: float
) -> None:
    """Flush ``borrowed`` and shut ``owned`` down (which exports what they hold) within ``timeout``
    seconds in all, the bounded batch ``processors`` of the owned tracer provider first; then log
    what was not exported. Never raises."""
    deadline = time.monotonic() + timeout
    if borrowed:
        flush_providers(borrowed, timeout)
    for processor in processors:
        _call(processor, "shutdown", max(0.0, deadline - time.monotonic()) * 1000)
    for provider in owned:
        remaining_ms = max(0.0, deadline - time.monotonic()) * 1000
        if hasattr(provider, "get_meter"):  # a MeterProvider: its shutdown takes a timeout
            # at least a moment: with none left it raises instead of returning
            _call(provider, "shutdown", max(remaining_ms, 1.0))
        else:
            _call(provider, "shutdown")
    for processor in processors:
        processor.report(timeout)


def flush_providers(providers: Sequence[Any], timeout: float) -> bool:
    """Flush ``providers`` on a helper thread for at most ``timeout`` seconds; False when that was
    not enough (the flush goes on in the background).

    Where no thread can start (interpreter exit, Python >= 3.12), the flush runs here, bounded
    only as far as the providers bound it themselves.
    """
    millis = int(timeout * 1000)

    def flush() -> None:
        for provider in providers:
            _call(provider, "force_flush", millis)

    try:
        thread = threading.Thread(target=flush, name="megatron-otel-flush", daemon=True)
        thread.start()
    except RuntimeError:  # interpreter exit (Python >= 3.12): no new threads
        flush()
        return True
    thread.join(timeout)
    if thread.is_alive():
        log_once(
            "flush-timeout",
            "flushing did not finish within %.1f s: the collector is slow or unreachable",
            timeout,
        )
        return False
    return True


def span_queue_lengths(processors: Sequence[Any]) -> list[int]:
    """How many spans wait in each bounded batch processor (a run's ``processors``; measuring)."""
    return [processor.queued() for processor in processors]


def _call(target: Any, method: str, *args: Any) -> None:
    try:
        getattr(target, method)(*args)
    except Exception:
        log_once(f"{method}:{id(target)}", "%s failed", method, exc_info=True)


def _processor_class() -> Any:
    """``BoundedBatchSpanProcessor``, defined on first use (the SDK is optional)."""
    if PROCESS.processor_class is None:
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class ExportCounter(SpanExporter):
            """A span exporter that counts the spans of failed exports and those in flight."""

            def __init__(self, exporter: Any) -> None:
                self.exporter = exporter
                self.failed = 0
                self.in_flight = 0

            def export(self, spans: Sequence[Any]) -> SpanExportResult:
                """Export through the wrapped exporter; count the spans when that fails."""
                self.in_flight = len(spans)
                result = SpanExportResult.FAILURE
                try:
                    result = self.exporter.export(spans)
                    return result  # type: ignore[no-any-return]  # SDK: export() untyped
                finally:
                    if result != SpanExportResult.SUCCESS:
                        self.failed += len(spans)
                    self.in_flight = 0

            def shutdown(self) -> None:
                """Shut the wrapped exporter down (which abandons its retries)."""
                self.exporter.shutdown()

            def force_flush(self, timeout_millis: int = 30000) -> bool:
                """Flush the wrapped exporter."""
                return bool(self.exporter.force_flush(timeout_millis))

        class BoundedBatchSpanProcessor(BatchSpanProcessor):
            """The SDK's BatchSpanProcessor, accounting for every span it does not export.

            A span ended while the queue is full is dropped and counted (the SDK would drop the
            oldest one and log a warning per span, on the training thread); exports that fail
            are counted; ``shutdown`` takes a timeout; ``report`` logs the totals once.
            """

            def __init__(self, exporter: Any, **limits: Any) -> None:
                self.capacity = int(limits["max_queue_size"])
                self.dropped = 0
                self.counter = ExportCounter(exporter)
                super().__init__(self.counter, **limits)
                batch = getattr(self, "_batch_processor", None)
                self._queue = getattr(batch, "_queue", None)  # SDK internals, checked below
                if not hasattr(self._queue, "__len__"):
                    self._queue = None
                self._reported = False

            def on_end(self, span: Any) -> None:
                """Queue the ended span for export; drop and count it when the queue is full."""
                queue = self._queue
                if queue is not None and len(queue) >= self.capacity:
                    self.dropped += 1
                    if self.dropped == 1:
                        LOG.warning(
                            "telemetry: the span queue is full (%d spans): spans are dropped "
                            "until the exporter catches up (the collector is slow or "
                            "unreachable); the number dropped is logged at shutdown",
                            self.capacity,
                        )
                    return
                super().on_end(span)

            def queued(self) -> int:
                """How many spans wait for export."""
                return len(self._queue) if self._queue is not None else 0

            def shutdown(self, timeout_millis: float | None = None) -> None:
                """Export what is queued, for at most ``timeout_millis``, and stop."""
                batch = getattr(self, "_batch_processor", None)
                if timeout_millis is None or batch is None:
                    super().shutdown()  # type: ignore[no-untyped-call]  # SDK: shutdown() untyped
                else:
                    batch.shutdown(timeout_millis=max(0.0, timeout_millis))

            def report(self, timeout: float) -> None:
                """Log, once, how many spans were not exported and why."""
                if self._reported:
                    return
                self._reported = True
                left = self.queued() + self.counter.in_flight
                if self.dropped or self.counter.failed or left:
                    LOG.warning(
                        "telemetry: %d spans dropped while the span queue was full, %d lost in "
                        "failed exports, %d still queued when the flush timeout (%.1f s) ran out",
                        self.dropped,
                        self.counter.failed,
                        left,
                        timeout,
                    )

        PROCESS.processor_class = BoundedBatchSpanProcessor
    return PROCESS.processor_class
