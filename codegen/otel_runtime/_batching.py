"""The batching core both span exporters of the runtime share: the lean recorder
(``_lean_recorder``) and the bounded batch processor of the SDK path (``_batch``).

Ended spans wait in per-thread buffers (a training thread appends to its own buffer, no lock
taken); a span ended while its thread's buffer holds ``capacity`` spans is dropped and counted
(logged once when a buffer first fills, the totals once by ``report``). One daemon thread exports
a batch of ``batch_size`` as soon as a buffer holds one (the appending thread sets ``wake`` once
per batch, never per span), and whatever is buffered when ``delay`` passed without a full batch.
``force_flush`` exports on the calling thread within its timeout; ``shutdown`` stops the thread
within its timeout (the export thread exports what is left meanwhile), then closes the exporter.
A forked child exports nothing of its parent's: every queue is emptied and stopped in the child.

A subclass says how a batch leaves (``_export``), what shutting down closes (``_close``) and what
a fork resets besides (``_forked``).
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from itertools import repeat, starmap
from typing import Any

from ._state import LOG, log_once

_QUEUES: weakref.WeakSet[BatchQueue] = weakref.WeakSet()


class _Buffer(threading.local):
    """This thread's buffer of ended spans (registered with its queue on first use)."""

    def __init__(self, queue: BatchQueue) -> None:
        super().__init__()
        self.spans: collections.deque[Any] = collections.deque()
        with queue.lock:
            queue.buffers.append(self.spans)


class BatchQueue:
    """Per-thread buffers of ended spans and the thread that exports them in batches."""

    thread_name = "megatron-otel-export"

    def __init__(
        self,
        capacity: int,
        batch_size: int,
        delay_millis: float,
        export_timeout_millis: float,
        shutdown_timeout: float | None = None,
    ) -> None:
        self.capacity = int(capacity)  # ended spans a thread's buffer holds, at most
        self.batch_size = int(batch_size)
        self.delay = float(delay_millis) / 1000
        self.export_timeout = float(export_timeout_millis) / 1000
        # what shutdown() waits without a timeout of its own (default: the export timeout)
        self.shutdown_timeout = (
            self.export_timeout if shutdown_timeout is None else shutdown_timeout
        )
        self.lock = threading.Lock()  # guards ``buffers``
        self.export_lock = threading.Lock()  # held while a batch is taken and exported
        self.buffers: list[collections.deque[Any]] = []
        self.local = _Buffer(self)  # its __init__ runs again in each thread that uses it
        self.wake = threading.Event()
        self.flushes: collections.deque[threading.Event] = collections.deque()  # asked, not served
        self.done = False
        self.dropped = 0  # ended while the thread's buffer was full
        self.failed = 0  # in exports that did not succeed (or could not be encoded)
        self.in_flight = 0  # in the export running now
        self.exported = 0
        self._reported = False
        self.thread: threading.Thread | None = threading.Thread(
            target=self._run, name=self.thread_name, daemon=True
        )
        self.thread.start()
        _QUEUES.add(self)

    # -- the training thread

    def push(self, span: Any) -> None:
        """Queue an ended span; drop and count it when this thread's buffer is full. Never
        raises."""
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

    def queued(self) -> int:
        """How many ended spans wait for export, in all buffers."""
        return sum(len(b) for b in list(self.buffers))

    # -- flush, shutdown, the totals

    def force_flush(self, timeout_millis: float = 30000) -> bool:
        """Have everything buffered now exported, waiting at most ``timeout_millis``; True when
        done. The export thread exports (a stuck export never holds the caller past its
        timeout); the caller itself only when that thread is gone."""
        deadline = time.monotonic() + max(0.0, timeout_millis) / 1000
        thread = self.thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            return self._drain(deadline)
        served = threading.Event()
        self.flushes.append(served)
        self.wake.set()
        return served.wait(max(0.0, deadline - time.monotonic()))

    def shutdown(self, timeout_millis: float | None = None) -> None:
        """Export what is buffered within ``timeout_millis`` (default: ``shutdown_timeout``),
        stop the export thread, then ``_close``. Later spans are ignored; a second call does
        nothing."""
        if self.done:
            return
        timeout = self.shutdown_timeout
        if timeout_millis is not None:
            timeout = max(0.0, timeout_millis) / 1000
        deadline = time.monotonic() + timeout
        self.done = True
        self.wake.set()
        thread, self.thread = self.thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
        self._close(thread is None or not thread.is_alive())

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

    # -- what a subclass says

    def _export(self, batch: list[Any]) -> None:
        """Send ``batch`` (on the export thread, or a flushing one), counting what failed."""
        raise NotImplementedError

    def _close(self, finished: bool) -> None:
        """After the export thread stopped (``finished``) or its join timed out: close the
        exporter."""

    def _forked(self) -> None:
        """In a forked child, after the queue was emptied and stopped: reset what else a parent's
        thread may have held."""

    # -- the export thread

    def _run(self) -> None:
        try:
            flushes = self.flushes
            while not self.done:
                # woken by a full buffer: full batches only (what is left rides with the next
                # batch or goes when the delay runs out), as the SDK's batch processor exports;
                # by a flush: everything
                full = self.wake.wait(self.delay)
                self.wake.clear()
                served = [flushes.popleft() for _ in range(len(flushes))]
                self._drain(None, full_only=full and not self.done and not served)
                for event in served:
                    event.set()
            # shut down: what is left, until the deadline the shutdown set (the join's timeout)
            done = self._drain(time.monotonic() + self.export_timeout)
            while flushes and done:
                flushes.popleft().set()
        except Exception:  # never expected; the spans then wait for a flush, bounded, counted
            log_once("lean-thread", "the span export thread stopped", exc_info=True)

    def _drain(self, deadline: float | None, full_only: bool = False) -> bool:
        """Export every buffered span (``full_only``: while a full batch is buffered), a batch at
        a time; False when ``deadline`` passed first (an export stuck past it included)."""
        if deadline is None:
            self.export_lock.acquire()
        elif not self.export_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return False
        try:
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
        finally:
            self.export_lock.release()

    def _take(self) -> list[Any]:
        """Up to ``batch_size`` spans, oldest first, buffer by buffer. A buffer only grows while
        this runs (its own thread appends; spans leave it here alone): the spans counted in it
        are there to pop, by ``popleft`` calls in C (``starmap``)."""
        batch: list[Any] = []
        for spans in list(self.buffers):
            take = min(len(spans), self.batch_size - len(batch))
            if take > 0:
                batch.extend(starmap(spans.popleft, repeat((), take)))
            if len(batch) >= self.batch_size:
                break
        return batch

    def _put_back(self, batch: list[Any]) -> None:
        if self.buffers:
            self.buffers[0].extendleft(reversed(batch))


def _after_fork_in_child() -> None:
    """A forked child never exports its parent's spans: every queue is emptied and stopped."""
    try:
        for queue in list(_QUEUES):
            queue.done = True
            queue.thread = None
            for spans in queue.buffers:
                spans.clear()
            queue.export_lock = threading.Lock()
            queue.lock = threading.Lock()
            queue._forked()
    except Exception:
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
