"""The one reader of capture files: the spans and metrics a run exported.

Two formats, told apart per document, any number of documents per file, any number of files:

- the OTLP JSON file format, as the OpenTelemetry Collector's ``file`` exporter writes it: one
  ``ExportTraceServiceRequest`` (``resourceSpans``) or ``ExportMetricsServiceRequest``
  (``resourceMetrics``) per line, or one (pretty-printed) document; ids in hex, 64-bit integers as
  numbers or decimal strings, enums as numbers or their names;
- the SDK console exporters' output: a stream of JSON objects, one per span (``context``,
  ``parent_id``, ISO times) or per metrics export (``resource_metrics``).

Files are read as a stream (one document in memory at a time) and treated as hostile: any file
that is not UTF-8 JSON of one of these shapes, that nests deeper than :data:`MAX_DEPTH`, holds a
document larger than :data:`MAX_DOCUMENT_BYTES`, or holds a record with a malformed field (ids of
the wrong length or not hex, times that are not numbers, a span with a start time and no end time
or one that ends before it starts, a field of the wrong type) raises :class:`CaptureError` naming the file, the line and the record, never a
traceback. A *record* is one span or one metric stream, numbered from 1 in file order.

OTLP spans are read twice over: a fast path (``_fast_otlp_span``) decodes a well-formed span with
cheap checks on the parsed JSON, and anything it does not accept goes through the checked path,
which reads it field by field and names what is wrong; both give the same records and the same
errors on every input (tests/report/test_fast_reader.py compares them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from codegen.capture.documents import _File
from codegen.capture.records import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    CapturedEvent,
    CapturedLink,
    CapturedMetric,
    CapturedPoint,
    CapturedSpan,
    CaptureError,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "CaptureError",
    "CapturedEvent",
    "CapturedLink",
    "CapturedMetric",
    "CapturedPoint",
    "CapturedSpan",
    "iter_records",
    "read_metrics",
    "read_spans",
]


def iter_records(paths: Path | Iterable[Path]) -> Iterator[CapturedSpan | CapturedMetric]:
    """Every span and metric stream of the files, in file order, one document in memory at a time."""
    for path in [paths] if isinstance(paths, Path) else paths:
        yield from _File(Path(path)).records()


def read_spans(paths: Path | Iterable[Path]) -> list[CapturedSpan]:
    return [r for r in iter_records(paths) if isinstance(r, CapturedSpan)]


def read_metrics(paths: Path | Iterable[Path]) -> list[CapturedMetric]:
    """The metric streams (one per export of each instrument; none in a span-only capture)."""
    return [r for r in iter_records(paths) if isinstance(r, CapturedMetric)]
