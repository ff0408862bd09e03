"""A span the runtime asks for is ended, or never started: whatever stops ``start_span`` half-way.

Instrumented code that recurses until Python's recursion limit (the ``try`` form the generator
writes, on the lean path; the SDK path still leaves its deepest span unended, see issue 27's
report): every span that started is ended, at any limit, and nothing is left on the open-span
stack or as the current span. An error the SDK's ``start_span`` raises
(MemoryError) is swallowed after the span it started is ended; a KeyboardInterrupt ends it too and
goes on to the program, as it would without telemetry.
"""

from __future__ import annotations

import sys
from types import ModuleType

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.lean_workload import enable_env, own_provider_exporting_to
from tests.support.processors import Counting, counting_provider

LIMITS = (150, 300, 600)  # each level records the escaping RecursionError: quadratic in the depth


def _recurse(otel: ModuleType, started: list[int], n: int) -> int:
    """What the generator writes for a ``try``-form span over a recursive function's body."""
    _otel_span = otel.CHECKPOINT and otel.start_span("megatron.checkpoint.save")
    try:
        started[0] += _otel_span is not None
        return _recurse(otel, started, n + 1)
    finally:
        _otel_span and _otel_span.end()


def _to_the_limit(otel: ModuleType, limit: int) -> int:
    """Recurse until the RecursionError; the number of spans that started."""
    started = [0]
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        with pytest.raises(RecursionError):
            _recurse(otel, started, 0)
    finally:
        sys.setrecursionlimit(previous)
    return started[0]


def _nothing_open(otel: ModuleType) -> None:
    assert otel._state.PROCESS.run.open_spans.stack == []
    assert not trace.get_current_span().is_recording()


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("processor", ["simple", "batch"])
def test_sdk_path_ends_every_span_it_started_at_the_recursion_limit(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, limit: int, processor: str
) -> None:
    enable_env(monkeypatch)
    counting = Counting()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(counting)
    export = SimpleSpanProcessor(exporter) if processor == "simple" else BatchSpanProcessor(exporter)
    provider.add_span_processor(export)
    otel.configure(tracer_provider=provider)
    started = _to_the_limit(otel, limit)
    provider.shutdown()  # every span the processor took is exported (a flush may leave a batch queued)
    assert started > 0
    assert counting.started == counting.ended, (limit, counting.started, counting.ended)
    assert len(exporter.get_finished_spans()) == counting.ended
    assert counting.ended >= started  # a span abandoned half-way was ended too
    _nothing_open(otel)


@pytest.mark.parametrize("limit", LIMITS)
def test_lean_path_ends_every_span_it_started_at_the_recursion_limit(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    exporter = own_provider_exporting_to(otel, monkeypatch, lean=True)
    otel.configure()
    assert type(otel._state.PROCESS.run.tracer) is otel._lean_tracer.LeanTracer
    started = _to_the_limit(otel, limit)
    _nothing_open(otel)
    otel.shutdown()
    assert started > 0
    assert len(exporter.get_finished_spans()) == started, limit


class _Raising(SpanProcessor):
    """A processor whose on_start raises ``error`` once the span started (an earlier processor
    saw it start)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def on_start(self, span: object, parent_context: object = None) -> None:
        raise self.error


@pytest.mark.parametrize("error", [MemoryError(), RecursionError(), KeyboardInterrupt()], ids=repr)
def test_whatever_the_sdk_start_span_raises_the_span_is_ended(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    enable_env(monkeypatch)
    provider, counting = counting_provider(_Raising(error))
    otel.configure(tracer_provider=provider)
    if isinstance(error, Exception):
        assert otel.start_span("megatron.checkpoint.save") is None  # swallowed: training goes on
    else:
        with pytest.raises(type(error)):  # the program's own interrupt: it goes on to the program
            otel.start_span("megatron.checkpoint.save")
    assert counting.started == counting.ended == 1
    _nothing_open(otel)
