"""A bounded batch span processor built on the SDK's public interfaces only (``SpanProcessor``,
``SpanExporter``): the runtime's own providers export through it on the SDK path.

The batching (per-thread buffers of at most ``max_queue_size`` spans, drops counted, one export
thread sending a batch of ``max_export_batch_size`` as soon as one is buffered and what is left
every ``schedule_delay_millis``, the bounded flush and shutdown, ``report``) is ``_batching``'s,
shared with the lean recorder. A training thread only appends to its buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._batching import BatchQueue
from ._state import LOG


def bounded_processor_class() -> Any:
    """``BoundedBatchSpanProcessor``, defined on first use (the SDK is optional)."""
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class BoundedBatchSpanProcessor(BatchQueue, SpanProcessor):
        """Exports ended spans in batches from bounded buffers, counting what it gives up."""

        thread_name = "megatron-otel-span-export"

        def __init__(
            self,
            exporter: SpanExporter,
            max_queue_size: int = 2048,
            schedule_delay_millis: float = 5000,
            max_export_batch_size: int = 512,
            export_timeout_millis: float = 30000,
        ) -> None:
            self.exporter = exporter
            capacity = max(1, int(max_queue_size))
            super().__init__(
                capacity,
                max(1, min(int(max_export_batch_size), capacity)),
                max(1.0, float(schedule_delay_millis)),
                export_timeout_millis,
                shutdown_timeout=30.0,
            )

        def on_start(self, span: Span, parent_context: Context | None = None) -> None:
            """Nothing to do when a span starts."""

        def on_end(self, span: ReadableSpan) -> None:
            """Queue the ended span; drop and count it when the buffer is full."""
            if span.context and span.context.trace_flags.sampled:
                self.push(span)

        def _export(self, batch: Sequence[ReadableSpan]) -> None:
            self.in_flight = len(batch)
            result = SpanExportResult.FAILURE
            try:
                result = self.exporter.export(batch)
            except Exception:  # an exporter's failure never reaches training
                LOG.debug("telemetry: span export failed", exc_info=True)
            finally:
                self.in_flight = 0
            if result != SpanExportResult.SUCCESS:
                self.failed += len(batch)
            else:
                self.exported += len(batch)

        def _close(self, finished: bool) -> None:
            try:
                self.exporter.shutdown()  # abandons the exporter's retries
            except Exception:
                LOG.debug("telemetry: exporter shutdown failed", exc_info=True)

    return BoundedBatchSpanProcessor
