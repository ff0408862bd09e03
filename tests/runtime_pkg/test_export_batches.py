"""What the lean recorder's export thread does per batch rather than per span: span ids drawn for
the whole batch under one hold of the id lock, call-site attribute sets encoded once and
remembered. Neither may change a byte of what is sent."""

from __future__ import annotations

import importlib
import threading
import time
from types import ModuleType
from typing import Any

import pytest


def _encoder(otel: ModuleType) -> tuple[ModuleType, Any]:
    """The runtime's ``_lean_span`` and a SpanEncoder of lean spans."""
    pytest.importorskip(
        "opentelemetry.exporter.otlp.proto.common",
        reason="the OTLP exporter is installed in tox -e runtime's environment, which runs this test",
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    otlp = importlib.import_module(f"{otel.__name__}._otlp")
    lean = importlib.import_module(f"{otel.__name__}._lean_span")
    encoder = otlp.SpanEncoder(
        Resource.create({}), InstrumentationScope("s"), {}, SpanLimits(), lean.LeanSpan, lambda s: None
    )
    return lean, encoder


def test_call_site_attributes_encode_the_same_remembered_or_not(otel: ModuleType) -> None:
    _, encoder = _encoder(otel)
    # equal as Python values, different on the wire: 1, True and 1.0; 0.0 and -0.0
    sets = [{"n": 1}, {"n": True}, {"n": 1.0}, {"n": 0.0}, {"n": -0.0}, {"n": "1"}, {"n": [1]}]
    for extra in sets + sets:  # the second time from the cache
        assert encoder._extra_attributes(extra) == encoder._attributes(extra), extra
    assert encoder._extra_attributes({"n": 0.0}) != encoder._extra_attributes({"n": -0.0})
    assert encoder._extra_attributes({"n": 1}) != encoder._extra_attributes({"n": True})


def test_the_encoder_draws_the_ids_nobody_asked_for_under_the_id_lock(otel: ModuleType) -> None:
    """``SpanEncoder.encode`` draws the span ids of a batch's spans and their parents that have
    none yet (an id drawn before stays), holding the id lock the training thread's ``span_id``
    takes: what goes on the wire is what a later ``span_id`` says."""
    import threading

    lean, encoder = _encoder(otel)
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    trace = (0xABC, 1, None)
    parent = lean.new_span(None, "p", None, trace, None, 10)
    children = [lean.new_span(None, f"c{i}", parent, trace, {"i": i}, 11) for i in range(3)]
    drawn = lean.new_span(None, "d", None, trace, None, 12, span_id=7)
    for span in (parent, *children, drawn):
        span._end = span._start + 1
    batch = [*children, drawn]
    done: list[tuple[bytes, int, int]] = []
    with lean._ID_LOCK:  # held by a training thread asking an id: the encoder waits for it
        thread = threading.Thread(target=lambda: done.append(encoder.encode(batch)))
        thread.start()
        thread.join(0.5)
        assert not done
    thread.join(30)
    (data, count, failed) = done[0]
    assert (count, failed) == (4, 0)
    ids = [s._id for s in (parent, *children)]
    assert all(ids) and len(set(ids)) == 4 and drawn._id == 7
    assert [s.span_id for s in (parent, *children, drawn)] == [*ids, 7]
    written = ExportTraceServiceRequest.FromString(data).resource_spans[0].scope_spans[0].spans
    on_wire = {s.name: (s.span_id, s.parent_span_id) for s in written}
    for child in children:
        assert on_wire[child._name] == (child._id.to_bytes(8, "big"), parent._id.to_bytes(8, "big"))
    assert on_wire["d"] == ((7).to_bytes(8, "big"), b"")
    # more ids to draw than spans in the batch (a parent outside it): drawn one at a time then
    parent = lean.new_span(None, "p", None, trace, None, 10)
    children = [lean.new_span(None, f"c{i}", parent, trace, None, 11) for i in range(2)]
    for span in children:
        span._end = 12
    data, count, failed = encoder.encode(children)
    assert (count, failed) == (2, 0)
    assert len({parent._id, *(c._id for c in children)} - {0}) == 3
    written = ExportTraceServiceRequest.FromString(data).resource_spans[0].scope_spans[0].spans
    assert {s.parent_span_id for s in written} == {parent._id.to_bytes(8, "big")}


def test_encoding_leaves_the_collector_s_count_where_it_was(otel: ModuleType) -> None:
    """Encoding allocates no container that outlives it: the collector's count of young objects
    is where it was (a key made by ``tuple(map(...))`` left it one higher per span with call-site
    attributes: a collection every 700 such spans, on the export thread)."""
    import gc

    lean, encoder = _encoder(otel)
    trace = (0xABC, 1, None)
    root = lean.new_span(None, "root", None, trace, None, 1)
    batch = [lean.new_span(None, "layer", root, trace, {"n": i % 4}, 2) for i in range(512)]
    for span in batch:
        span._end = 3
    encoder.encode(batch)  # the templates made and remembered
    gc.disable()
    try:
        before = gc.get_count()[0]
        for _ in range(4):
            assert encoder.encode(batch)[1:] == (512, 0)
        assert gc.get_count()[0] - before < 64
    finally:
        gc.enable()


def test_a_batch_s_span_ids_are_drawn_at_once_then_0(otel: ModuleType) -> None:
    ids = importlib.import_module(f"{otel.__name__}._ids")
    draw = ids.span_ids(64)
    drawn = [draw() for _ in range(64)]
    assert len(set(drawn)) == 64 and all(0 < i < 2**64 for i in drawn)
    assert [draw(), draw()] == [0, 0]  # the caller draws again (span_id)


def test_a_flush_has_the_export_thread_export_and_never_waits_past_its_timeout(otel: ModuleType) -> None:
    """The flushing thread asks; the export thread exports. A flush that exported on the caller's
    thread would wait out an export stuck there (a slow collector) past its timeout."""
    batching = importlib.import_module(f"{otel.__name__}._batching")
    release = threading.Event()
    threads: list[str] = []

    class Recording(batching.BatchQueue):
        def _export(self, batch: list[object]) -> None:
            threads.append(threading.current_thread().name)
            release.wait(60)
            self.exported += len(batch)

    queue = Recording(8, 2, 3_600_000, 30_000)  # a batch of 2; the delay never runs out
    for span in range(3):
        queue.push(span)  # the second fills a batch: the export thread takes it and is stuck
    started = time.monotonic()
    assert queue.force_flush(300) is False
    assert time.monotonic() - started < 5  # its timeout, not the stuck export's 60 s
    release.set()
    assert queue.force_flush(10_000) is True
    assert queue.exported == 3 and queue.queued() == 0
    assert set(threads) == {queue.thread_name}  # never the flushing thread
    queue.shutdown(1000)
