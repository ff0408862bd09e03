"""The lean path's current-span rule (``_lean_tracer._LeanContext``): no context is made per span, so
what code reading the current span sees is tested here case by case.

The rule: on the thread that opened a nesting of taxonomy spans, the current span is the
innermost of them still open; on another thread (a context carried over), the nesting's
outermost span; ``copy()`` (the API's ``set_value``) takes the current span along.
"""

from __future__ import annotations

import contextvars
import threading
from types import ModuleType
from typing import Any

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.lean_workload import own_provider_exporting_to
from tests.support.processors import in_memory


@pytest.fixture
def lean(otel: ModuleType, monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = own_provider_exporting_to(otel, monkeypatch, lean=True)
    otel.configure()
    assert type(otel._state.PROCESS.run.tracer).__name__ == "LeanTracer"
    return exporter


@pytest.fixture
def foreign() -> tuple[trace.Tracer, InMemorySpanExporter]:
    provider, exporter = in_memory()
    return provider.get_tracer("foreign"), exporter


def finished(
    otel: ModuleType, lean: InMemorySpanExporter, *others: InMemorySpanExporter
) -> dict[str, ReadableSpan]:
    otel.shutdown()
    spans = list(lean.get_finished_spans())
    for exporter in others:
        spans += exporter.get_finished_spans()
    return {s.name: s for s in spans}


def open_nested(otel: ModuleType) -> tuple[Any, Any]:
    """An iteration span and, opened inside it, a layer's forward span; both left open."""
    outer = otel.start_span("megatron.train.iteration")
    return outer, otel.start_span("megatron.layer.forward")


def parent_name(spans: dict[str, ReadableSpan], name: str) -> str | None:
    span = spans[name]
    if span.parent is None:
        return None
    return next(s.name for s in spans.values() if s.context.span_id == span.parent.span_id)


def test_the_current_span_is_the_innermost_open_one(otel: ModuleType, lean: InMemorySpanExporter) -> None:
    before = context.get_current()
    outer = otel.start_span("megatron.train.iteration")
    assert trace.get_current_span() is outer
    inner = otel.start_span("megatron.layer.forward")
    assert trace.get_current_span() is inner
    innermost = otel.start_span("megatron.layer.mlp")
    assert trace.get_current_span() is innermost
    innermost.end()
    assert trace.get_current_span() is inner
    inner.end()
    assert trace.get_current_span() is outer
    outer.end()
    assert context.get_current() is before  # the outermost span restores the context it replaced
    spans = finished(otel, lean)
    assert parent_name(spans, "megatron.layer.mlp") == "megatron.layer.forward"
    assert parent_name(spans, "megatron.layer.forward") == "megatron.train.iteration"


def test_foreign_spans_parent_to_the_innermost_and_back(
    otel: ModuleType, lean: InMemorySpanExporter, foreign: tuple[trace.Tracer, InMemorySpanExporter]
) -> None:
    tracer, foreign_exporter = foreign
    outer, inner = open_nested(otel)
    with tracer.start_as_current_span("foreign.op"):
        nested = otel.start_span("megatron.layer.mlp")  # inside the foreign span
        with tracer.start_as_current_span("foreign.inner"):
            pass
        nested.end()
        assert trace.get_current_span().name == "foreign.op"  # type: ignore[attr-defined]
    assert trace.get_current_span() is inner
    inner.end()
    with tracer.start_as_current_span("foreign.after"):
        pass
    outer.end()
    spans = finished(otel, lean, foreign_exporter)
    assert parent_name(spans, "foreign.op") == "megatron.layer.forward"
    assert parent_name(spans, "megatron.layer.mlp") == "foreign.op"
    assert parent_name(spans, "foreign.inner") == "megatron.layer.mlp"
    assert parent_name(spans, "foreign.after") == "megatron.train.iteration"
    assert len({s.context.trace_id for s in spans.values()}) == 1


def test_set_value_keeps_the_current_span(otel: ModuleType, lean: InMemorySpanExporter) -> None:
    outer, inner = open_nested(otel)
    token = context.attach(baggage.set_baggage("k", "v"))  # the API copies the current context
    assert trace.get_current_span() is inner and baggage.get_baggage("k") == "v"
    context.detach(token)
    inner.end()
    assert trace.get_current_span() is outer and baggage.get_baggage("k") is None
    outer.end()


def test_a_context_captured_in_a_span_read_later_on_its_thread(
    otel: ModuleType, lean: InMemorySpanExporter
) -> None:
    outer, inner = open_nested(otel)
    captured = context.get_current()
    inner.end()
    # the innermost span of the nesting still open
    assert trace.get_current_span(captured) is outer
    outer.end()
    assert trace.get_current_span(captured) is outer  # the nesting is over: its outermost span


def test_a_context_carried_to_another_thread_parents_to_the_outermost_span(
    otel: ModuleType, lean: InMemorySpanExporter, foreign: tuple[trace.Tracer, InMemorySpanExporter]
) -> None:
    tracer, foreign_exporter = foreign
    outer, inner = open_nested(otel)
    captured = context.get_current()
    seen: dict[str, Any] = {}

    def worker() -> None:
        token = context.attach(captured)
        try:
            seen["current"] = trace.get_current_span()
            with tracer.start_as_current_span("foreign.worker"):
                pass
            span = otel.start_span("megatron.checkpoint.save")  # a taxonomy span of the worker
            seen["stack"] = list(otel._state.PROCESS.run.open_spans.stack)
            span.end()
        finally:
            context.detach(token)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["current"] is outer
    assert [s._name for s in seen["stack"]] == ["megatron.checkpoint.save"]  # its own stack
    assert otel._state.PROCESS.run.open_spans.stack == [outer, inner]  # this thread's, untouched
    inner.end()
    outer.end()
    spans = finished(otel, lean, foreign_exporter)
    assert parent_name(spans, "foreign.worker") == "megatron.train.iteration"
    assert parent_name(spans, "megatron.checkpoint.save") == "megatron.train.iteration"


def test_a_copied_context_run_on_the_same_thread(otel: ModuleType, lean: InMemorySpanExporter) -> None:
    outer = otel.start_span("megatron.train.iteration")

    def in_copy() -> None:
        span = otel.start_span("megatron.layer.forward")
        assert trace.get_current_span() is span
        span.end()

    contextvars.copy_context().run(in_copy)
    assert trace.get_current_span() is outer
    outer.end()
    spans = finished(otel, lean)
    assert parent_name(spans, "megatron.layer.forward") == "megatron.train.iteration"


def test_spans_left_open_by_an_exception_end_with_their_outer_span(
    otel: ModuleType, lean: InMemorySpanExporter
) -> None:
    before = context.get_current()
    outer = otel.start_span("megatron.train.iteration")
    try:
        left = otel.start_span("megatron.layer.forward")  # the flat form: no finally
        otel.start_span("megatron.layer.mlp")
        raise RuntimeError("boom")
        left.end()  # never reached
    except RuntimeError:
        pass
    outer.end()
    assert context.get_current() is before
    assert otel._state.PROCESS.run.open_spans.stack == []
    spans = finished(otel, lean)
    assert set(spans) == {"megatron.train.iteration", "megatron.layer.forward", "megatron.layer.mlp"}
    assert all(s.end_time is not None for s in spans.values())


def test_sigterm_ends_the_open_lean_spans_of_every_thread(
    otel: ModuleType, lean: InMemorySpanExporter
) -> None:
    """What the SIGTERM handler calls (test_process_exit): every thread's spans end, this thread's
    context is restored."""
    before = context.get_current()
    opened, release = threading.Event(), threading.Event()

    def worker() -> None:
        span = otel.start_span("megatron.checkpoint.save")
        otel.start_span("megatron.layer.forward")
        opened.set()
        release.wait(10)
        span.end()  # already ended by the abort: nothing happens

    thread = threading.Thread(target=worker)
    thread.start()
    assert opened.wait(10)
    otel.start_span("megatron.train.iteration")
    otel.start_span("megatron.layer.mlp")
    otel._spans.abort_open_spans("SIGTERM")
    release.set()
    thread.join()
    assert context.get_current() is before
    spans = finished(otel, lean)
    assert len(spans) == 4
    assert all(s.status.status_code is trace.StatusCode.ERROR for s in spans.values())


def test_a_past_runs_start_span_records_in_the_current_run(
    otel: ModuleType, lean: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package's start_span is the run's LeanTracer.open while it records lean; code that
    kept it (``from otel import start_span`` after configure) records in whatever run is current."""
    kept = otel.start_span
    assert kept.__func__ is otel._lean_tracer.LeanTracer.open
    otel.reset()
    assert otel.start_span is otel._spans.start_span  # a new run: the package's own again
    assert kept("megatron.layer.forward") is None  # no run records now
    exporter = own_provider_exporting_to(otel, monkeypatch, lean=True)
    otel.configure()
    span = kept("megatron.layer.forward")
    assert span is not None and trace.get_current_span() is span
    span.end()
    spans = finished(otel, exporter)
    assert list(spans) == ["megatron.layer.forward"]
