"""A bounded batch span processor built on the SDK's public interfaces only (``SpanProcessor``,
``SpanExporter``): the runtime's own providers export through it.

Ended spans wait in a queue of at most ``max_queue_size``; a span ended while it is full is
dropped and counted (logged once when the queue first fills, the totals once by ``report``). One
daemon thread exports a batch of ``max_export_batch_size`` as soon as one is queued, and what is
queued when ``schedule_delay_millis`` passed without a full batch; ``force_flush`` and
``shutdown`` wait at most their timeout. A training thread only appends to the queue under a lock.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from typing import Any

from ._state import LOG


def bounded_processor_class() -> Any:
    """``BoundedBatchSpanProcessor``, defined on first use (the SDK is optional)."""
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class BoundedBatchSpanProcessor(SpanProcessor):
        """Exports ended spans in batches from a bounded queue, counting what it gives up."""

        def __init__(
            self,
            exporter: SpanExporter,
            max_queue_size: int = 2048,
            schedule_delay_millis: float = 5000,
            max_export_batch_size: int = 512,
            export_timeout_millis: float = 30000,
        ) -> None:
            self.exporter = exporter
            self.capacity = max(1, int(max_queue_size))
            self.batch_size = max(1, min(int(max_export_batch_size), self.capacity))
            self.delay = max(0.001, float(schedule_delay_millis) / 1000)
            self.export_timeout = float(export_timeout_millis) / 1000
            self.dropped = 0  # ended while the queue was full
            self.failed = 0  # in exports that did not succeed
            self.in_flight = 0  # in the export running now
            self._queue: collections.deque[ReadableSpan] = collections.deque()
            self._lock = threading.Lock()
            self._wake = threading.Condition(self._lock)
            self._flushes = 0  # flush requests served (a flush waits for its own number)
            self._flush_wanted = 0
            self._done = threading.Condition(self._lock)
            self._stopping = False
            self._reported = False
            self._thread = threading.Thread(
                target=self._work, name="megatron-otel-span-export", daemon=True
            )
            self._thread.start()

        # -- the training thread ----------------------------------------------------------------

        def on_start(self, span: Span, parent_context: Context | None = None) -> None:
            """Nothing to do when a span starts."""

        def on_end(self, span: ReadableSpan) -> None:
            """Queue the ended span; drop and count it when the queue is full."""
            if not span.context or not span.context.trace_flags.sampled:
                return
            with self._lock:
                if self._stopping:
                    return
                if len(self._queue) >= self.capacity:
                    self.dropped += 1
                    first = self.dropped == 1
                else:
                    self._queue.append(span)
                    first = False
                    if len(self._queue) >= self.batch_size:
                        self._wake.notify()
            if first:
                LOG.warning(
                    "telemetry: the span queue is full (%d spans): spans are dropped until "
                    "the exporter catches up (the collector is slow or unreachable); the "
                    "number dropped is logged at shutdown",
                    self.capacity,
                )

        def queued(self) -> int:
            """How many spans wait for export."""
            with self._lock:
                return len(self._queue)

        # -- the export thread --------------------------------------------------------------------

        def _work(self) -> None:
            while True:
                with self._lock:
                    # a full batch goes at once, a partial one when the delay runs out
                    if (
                        len(self._queue) < self.batch_size
                        and not self._stopping
                        and self._flush_wanted == self._flushes
                    ):
                        self._wake.wait(self.delay)
                    batch = [
                        self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))
                    ]
                    stopping = self._stopping
                    flush = self._flush_wanted
                    self.in_flight = len(batch)
                if batch:
                    self._export(batch)
                with self._lock:
                    self.in_flight = 0
                    if not self._queue:
                        self._flushes = flush
                        self._done.notify_all()
                    if stopping and not self._queue:
                        return

        def _export(self, batch: Sequence[ReadableSpan]) -> None:
            result = SpanExportResult.FAILURE
            try:
                result = self.exporter.export(batch)
            except Exception:  # an exporter's failure never reaches training
                LOG.debug("telemetry: span export failed", exc_info=True)
            if result != SpanExportResult.SUCCESS:
                self.failed += len(batch)

        # -- flush and shutdown -------------------------------------------------------------------

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            """Export what is queued now; True when it was done within ``timeout_millis``."""
            deadline = time.monotonic() + max(0.0, timeout_millis / 1000)
            with self._lock:
                if not self._thread.is_alive():
                    return not self._queue
                self._flush_wanted += 1
                wanted = self._flush_wanted
                self._wake.notify()
                while self._flushes < wanted:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._done.wait(left)
            return True

        def shutdown(self, timeout_millis: float | None = None) -> None:
            """Export what is queued, for at most ``timeout_millis`` (30 s when None), and stop;
            what is left then is given up (``report`` counts it)."""
            timeout = 30.0 if timeout_millis is None else max(0.0, timeout_millis / 1000)
            with self._lock:
                self._stopping = True
                self._wake.notify()
            self._thread.join(timeout)
            try:
                self.exporter.shutdown()  # abandons the exporter's retries
            except Exception:
                LOG.debug("telemetry: exporter shutdown failed", exc_info=True)

        def report(self, timeout: float) -> None:
            """Log, once, how many spans were not exported and why."""
            if self._reported:
                return
            self._reported = True
            with self._lock:
                left = len(self._queue) + self.in_flight
            if self.dropped or self.failed or left:
                LOG.warning(
                    "telemetry: %d spans dropped while the span queue was full, %d lost in failed "
                    "exports, %d still queued when the flush timeout (%.1f s) ran out",
                    self.dropped,
                    self.failed,
                    left,
                    timeout,
                )

    return BoundedBatchSpanProcessor
