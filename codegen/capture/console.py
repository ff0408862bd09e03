"""The SDK console exporters' output: spans and metric exports as JSON objects."""

from __future__ import annotations

import datetime
from typing import Any

from codegen.capture.fields import _count, _float, _nanos, _number, _Obj, _show, _to_float, _type
from codegen.capture.records import (
    SPAN_KINDS,
    STATUS_CODES,
    CapturedEvent,
    CapturedLink,
    CapturedMetric,
    CapturedPoint,
    CapturedSpan,
    _Malformed,
)


def _console_attributes(raw: _Obj) -> dict[str, Any]:
    value = raw.value
    if not isinstance(value, dict):
        raise _Malformed(raw.where, f"must be an object, not {_type(value)}")
    return dict(value)


def iso_nanos(text: str) -> int:
    """ISO 8601 (UTC when no offset) -> ns since the epoch; ValueError otherwise."""
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _iso_nanos(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        try:
            return iso_nanos(value)
        except ValueError:
            pass
    raise _Malformed(where, f"{_show(value)} is not an ISO 8601 time")


def _console_span(raw: _Obj, source: str) -> CapturedSpan:
    name = raw.string("name", required=True)
    context = raw.obj("context")
    trace_id = context.hex_id("trace_id", 32)
    span_id = context.hex_id("span_id", 16)
    parent = raw.hex_id("parent_id", 16, optional=True)
    start = _iso_nanos(raw.get("start_time"), raw._at("start_time"))
    end = _iso_nanos(raw.get("end_time"), raw._at("end_time"))
    if start and not end:
        raise _Malformed(raw._at("end_time"), f"span '{name}' has a start time and no end time")
    if end < start:
        raise _Malformed(
            "", f"span '{name}' ends before it starts ({raw.get('end_time')} < {raw.get('start_time')})"
        )
    status = raw.obj("status", optional=True)
    kind = raw.get("kind")
    if kind is not None and not (isinstance(kind, str) and kind.removeprefix("SpanKind.") in SPAN_KINDS):
        raise _Malformed(raw._at("kind"), f"{_show(kind)} is not a span kind (SpanKind.INTERNAL, ...)")
    links = []
    for link in raw.array("links"):
        ctx = link.obj("context")
        links.append(
            CapturedLink(
                ctx.hex_id("trace_id", 32),
                ctx.hex_id("span_id", 16),
                _console_attributes(link.obj("attributes", optional=True)),
            )
        )
    events = tuple(
        CapturedEvent(
            e.string("name"),
            _iso_nanos(e.get("timestamp"), e._at("timestamp")),
            _console_attributes(e.obj("attributes", optional=True)),
        )
        for e in raw.array("events")
    )
    code = status.string("status_code") or "UNSET"
    if code.removeprefix("StatusCode.") not in STATUS_CODES:
        raise _Malformed(status._at("status_code"), f"{_show(code)} is not one of {', '.join(STATUS_CODES)}")
    return CapturedSpan(
        name,
        trace_id,
        span_id,
        parent,
        start,
        end,
        _console_attributes(raw.obj("attributes", optional=True)),
        _console_attributes(raw.obj("resource", optional=True).obj("attributes", optional=True)),
        tuple(links),
        events,
        code.removeprefix("StatusCode."),
        status.string("description"),
        kind.removeprefix("SpanKind.") if isinstance(kind, str) else "INTERNAL",
        "",
        source,
    )


def _console_metric(raw: _Obj, resource: dict[str, Any], scope: str, source: str) -> CapturedMetric:
    if not isinstance(raw.value, dict):
        raise _Malformed(raw.where, f"a metric must be an object, not {_type(raw.value)}")
    name = raw.string("name", required=True)
    data = raw.obj("data")
    points = []
    kind = "sum" if "is_monotonic" in data.value else "gauge"
    for point in data.array("data_points"):
        if not isinstance(point.value, dict):
            raise _Malformed(point.where, f"a data point must be an object, not {_type(point.value)}")
        if "bucket_counts" in point.value:
            kind = "histogram"
        count = _count(point, "count")
        total = _number(point, "sum")
        points.append(
            CapturedPoint(
                _console_attributes(point.obj("attributes", optional=True)),
                _nanos(point.get("start_time_unix_nano"), point._at("start_time_unix_nano")),
                _nanos(point.get("time_unix_nano"), point._at("time_unix_nano")),
                _number(point, "value"),
                count,
                _to_float(total, point._at("sum")) if total is not None else None,
                tuple(_nanos(c.value, c.where, "a count") for c in point.array("bucket_counts")),
                tuple(_float(b) for b in point.array("explicit_bounds")),
            )
        )
    return CapturedMetric(name, raw.string("unit"), kind, tuple(points), resource, scope, source)
