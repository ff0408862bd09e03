"""SDK span and metric exporters writing the OTLP JSON file format, one request per line.

The format is the one the collector's file exporter writes (and ``codegen verify`` reads): each
line an ``ExportTraceServiceRequest`` (``resourceSpans``) or ``ExportMetricsServiceRequest``
(``resourceMetrics``) in OTLP/JSON (ids as hex, 64-bit integers as strings, enums as numbers).
Each line also names the process that wrote it (resource attribute ``process.pid``), so a forked
child that exports through an inherited exporter is visible in the capture.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    MetricExporter,
    MetricExportResult,
    Sum,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}
_KIND = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attributes(attributes: Any) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in dict(attributes or {}).items()]


def _resource(resource: Any) -> dict[str, Any]:
    values = dict(resource.attributes) if resource is not None else {}
    values["process.pid"] = os.getpid()
    return {"attributes": _attributes(values)}


def _span(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    out = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
        "name": span.name,
        "kind": _KIND.get(span.kind.name, 1),
        "startTimeUnixNano": str(span.start_time),
        "endTimeUnixNano": str(span.end_time),
        "attributes": _attributes(span.attributes),
        "events": [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": _attributes(e.attributes)}
            for e in span.events
        ],
        "links": [
            {"traceId": f"{l.context.trace_id:032x}", "spanId": f"{l.context.span_id:016x}"}
            for l in span.links
        ],
        "status": {"code": _STATUS[span.status.status_code.name]},
    }
    if span.status.description:
        out["status"]["message"] = span.status.description
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    return out


class _Lines:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()

    def write(self, document: dict[str, Any]) -> None:
        line = json.dumps(document, separators=(",", ":")) + "\n"
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(line)
            out.flush()


class OtlpJsonSpanExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.lines = _Lines(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        by_resource: dict[int, tuple[Any, list[ReadableSpan]]] = {}
        for span in spans:
            by_resource.setdefault(id(span.resource), (span.resource, []))[1].append(span)
        self.lines.write(
            {
                "resourceSpans": [
                    {
                        "resource": _resource(resource),
                        "scopeSpans": [{"scope": {"name": "megatron"}, "spans": [_span(s) for s in group]}],
                    }
                    for resource, group in by_resource.values()
                ]
            }
        )
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _point(point: Any, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "attributes": _attributes(point.attributes),
        "startTimeUnixNano": str(point.start_time_unix_nano or 0),
        "timeUnixNano": str(point.time_unix_nano),
    }
    if kind == "histogram":
        out.update(
            count=str(point.count),
            sum=point.sum,
            bucketCounts=[str(c) for c in point.bucket_counts],
            explicitBounds=list(point.explicit_bounds),
            min=point.min,
            max=point.max,
        )
    elif isinstance(point.value, int):
        out["asInt"] = str(point.value)
    else:
        out["asDouble"] = point.value
    return out


def _metric(metric: Any) -> dict[str, Any]:
    data = metric.data
    out: dict[str, Any] = {
        "name": metric.name,
        "unit": metric.unit or "",
        "description": metric.description or "",
    }
    temporality = 1 if getattr(data, "aggregation_temporality", None) == AggregationTemporality.DELTA else 2
    if isinstance(data, Histogram):
        out["histogram"] = {
            "dataPoints": [_point(p, "histogram") for p in data.data_points],
            "aggregationTemporality": temporality,
        }
    elif isinstance(data, Sum):
        out["sum"] = {
            "dataPoints": [_point(p, "sum") for p in data.data_points],
            "aggregationTemporality": temporality,
            "isMonotonic": data.is_monotonic,
        }
    elif isinstance(data, Gauge):
        out["gauge"] = {"dataPoints": [_point(p, "gauge") for p in data.data_points]}
    return out


class OtlpJsonMetricExporter(MetricExporter):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.lines = _Lines(path)

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        documents = []
        for resource_metrics in metrics_data.resource_metrics:
            scopes = [
                {"scope": {"name": sm.scope.name}, "metrics": [_metric(m) for m in sm.metrics]}
                for sm in resource_metrics.scope_metrics
            ]
            if any(scope["metrics"] for scope in scopes):
                documents.append({"resource": _resource(resource_metrics.resource), "scopeMetrics": scopes})
        if documents:
            self.lines.write({"resourceMetrics": documents})
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


class OpenSpans(SpanProcessor):
    """Remembers the spans started in this process and not ended yet (what a crash would lose)."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}
        self.pid = os.getpid()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.open[span.get_span_context().span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        self.open.pop(span.get_span_context().span_id, None)
