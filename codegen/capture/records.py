"""The records a capture file holds (spans, metric streams) and the one error it raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 64  # OTLP needs about 12 levels (a nested kvlist attribute value a few more)
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024  # one request or one console object
_CHUNK = 1 << 20

STATUS_CODES = ("UNSET", "OK", "ERROR")
SPAN_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")


class CaptureError(Exception):
    """A capture file cannot be read, or holds a malformed record; the message says where."""


@dataclass(frozen=True)
class CapturedLink:
    trace_id: str
    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CapturedEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CapturedSpan:
    """One exported span. Ids are lower-case hex without ``0x``; times in ns since the epoch
    (0 when the capture leaves both out; the console exporter's have microsecond precision)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    links: tuple[CapturedLink, ...] = ()
    events: tuple[CapturedEvent, ...] = ()
    status: str = "UNSET"  # "UNSET", "OK" or "ERROR"
    status_message: str = ""
    kind: str = "INTERNAL"  # "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER" ("UNSPECIFIED")
    scope: str = ""  # the instrumentation scope's name (OTLP only)
    source: str = ""  # "path:line: record N": where the record is

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def thread_id(self) -> int | None:
        value = self.attributes.get("thread.id")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def thread_name(self) -> str | None:
        value = self.attributes.get("thread.name")
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class CapturedPoint:
    """One data point: ``value`` for sums and gauges, ``count``/``sum``/buckets for histograms."""

    attributes: dict[str, Any]
    start_ns: int
    time_ns: int
    value: int | float | None = None
    count: int | None = None
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()


@dataclass(frozen=True)
class CapturedMetric:
    name: str
    unit: str
    kind: str  # the OTLP data field: "histogram", "sum", "gauge" ("exponentialHistogram", "summary")
    data_points: tuple[CapturedPoint, ...] = ()
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""
    source: str = ""

    @property
    def points(self) -> int:
        return len(self.data_points)


class _Malformed(Exception):
    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message
