"""Span processors the runtime tests watch the SDK through."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Counting(SpanProcessor):
    """Counts SDK spans started and ended."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0

    def on_start(self, span: object, parent_context: object = None) -> None:
        self.started += 1

    def on_end(self, span: object) -> None:
        self.ended += 1


def counting_provider(*processors: SpanProcessor) -> tuple[TracerProvider, Counting]:
    """A tracer provider (no exit hook of its own) whose first processor counts, then
    ``processors``; the provider and the count."""
    counting = Counting()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(counting)
    for processor in processors:
        provider.add_span_processor(processor)
    return provider, counting


def metric_points(reader: Any) -> dict[str, list[Any]]:
    """Every data point an SDK metric reader holds, by instrument name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def in_memory(**options: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider (``options`` are TracerProvider's) handing each span as it ends to an
    in-memory exporter; the provider and the exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(**options)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter
