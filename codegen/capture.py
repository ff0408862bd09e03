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

import codecs
import datetime
import json
import math
import re
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

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


# -- public entry points ------------------------------------------------------------------------


def iter_records(paths: Path | Iterable[Path]) -> Iterator[CapturedSpan | CapturedMetric]:
    """Every span and metric stream of the files, in file order, one document in memory at a time."""
    for path in [paths] if isinstance(paths, Path) else paths:
        yield from _File(Path(path)).records()


def read_spans(paths: Path | Iterable[Path]) -> list[CapturedSpan]:
    return [r for r in iter_records(paths) if isinstance(r, CapturedSpan)]


def read_metrics(paths: Path | Iterable[Path]) -> list[CapturedMetric]:
    """The metric streams (one per export of each instrument; none in a span-only capture)."""
    return [r for r in iter_records(paths) if isinstance(r, CapturedMetric)]


# -- documents ----------------------------------------------------------------------------------

# JSON strings cannot hold a raw newline, so one line's brackets outside strings tell its nesting.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?')  # a string, or the rest of the line if unterminated
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"{}[]")
_NOT_QUOTE_OR_BRACKET = bytes(b for b in range(256) if b not in b'"{}[]')
_PARENS = bytes.maketrans(b"{[}]", b"(())")
_LEVEL = bytes.maketrans(b"{[}]", bytes((1, 1, 255, 255)))  # as signed bytes: +1 and -1


def _nesting(raw: bytes, depth: int) -> tuple[int, int]:
    """(deepest, final) nesting of the brackets of one line outside its strings, from ``depth``
    (deepest: at least the real depth, and exact when that is more than :data:`MAX_DEPTH`)."""
    if depth == 0 and b"\\" not in raw:  # a line that starts a document, with no escapes
        # A string is the text between two quotes; if no string holds a bracket, the strings are
        # the adjacent quote pairs, and removing them leaves no quote.
        brackets = raw.translate(None, _NOT_QUOTE_OR_BRACKET).replace(b'""', b"")
        if b'"' not in brackets:
            # Each pass removes the innermost pairs: a balanced line empties after as many passes
            # as it nests deep.
            pairs = brackets.translate(_PARENS)
            for level in range(MAX_DEPTH + 1):
                if not pairs:
                    return level, 0
                pairs = pairs.replace(b"()", b"")
    if b"\\" in raw:  # escapes (a quote inside a string, say): the strings by a regex
        brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    else:  # no escapes: a string runs from one quote to the next (the last one to the line's end)
        brackets = b"".join(raw.translate(None, _NOT_QUOTE_OR_BRACKET).split(b'"')[::2])
    opens = brackets.count(b"{") + brackets.count(b"[")
    final = depth + 2 * opens - len(brackets)
    if depth + opens <= MAX_DEPTH:
        return depth + opens, final  # at most that deep
    return max(accumulate(array("b", brackets.translate(_LEVEL)), initial=depth)), final


class _Malformed(Exception):
    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


class _File:
    def __init__(self, path: Path, fast: bool = True) -> None:
        self.path = path
        self.record = 0
        self.fast = fast  # False: every record through the checked path (the tests compare both)

    def error(self, line: int, col: int, message: str) -> CaptureError:
        return CaptureError(f"{self.path}:{line}:{col}: error: {message}")

    def records(self) -> Iterator[CapturedSpan | CapturedMetric]:
        try:
            handle = self.path.open("rb")
        except OSError as exc:
            raise CaptureError(f"{self.path}: error: cannot read: {exc.strerror or exc}") from exc
        with handle:
            for line, document in self._documents(handle):
                yield from self._records_of(document, line)

    def _documents(self, handle: IO[bytes]) -> Iterator[tuple[int, Any]]:
        """(first line, document) for each JSON document of the file, read line by line."""
        buffer: list[bytes] = []
        size = 0  # of the buffer and the partial line
        depth = 0
        start_line = 1
        number = 0  # lines read
        partial = b""
        while True:
            try:
                chunk = handle.readline(_CHUNK)
            except OSError as exc:
                raise CaptureError(f"{self.path}: error: cannot read: {exc.strerror or exc}") from exc
            if number == 0 and not partial:
                chunk = self._first_chunk(chunk)
            if b"\0" in chunk:
                col = len(partial) + chunk.index(b"\0") + 1
                raise self.error(number + 1, col, "a binary file (a NUL byte), not a JSON capture")
            size += len(chunk)
            if size > MAX_DOCUMENT_BYTES:
                raise self.error(start_line if buffer else number + 1, 1, self._too_big())
            if chunk and not chunk.endswith(b"\n"):
                partial += chunk  # a line longer than a chunk, or the last line
                continue
            raw, partial = partial + chunk, b""
            if not raw:
                break
            number += 1
            if not buffer:
                if not raw.strip():
                    size = 0
                    continue
                start_line = number
            deepest, depth = _nesting(raw, depth)
            if deepest > MAX_DEPTH:
                raise self.error(number, 1, f"nested deeper than {MAX_DEPTH} levels: not a capture")
            buffer.append(raw)
            if depth <= 0:
                yield from self._decode(b"".join(buffer), start_line)
                buffer, size, depth = [], 0, 0
        if buffer:
            yield from self._decode(b"".join(buffer), start_line)

    def _too_big(self) -> str:
        limit = MAX_DOCUMENT_BYTES
        size = f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
        return f"a document larger than {size}: not a capture"

    def _first_chunk(self, raw: bytes) -> bytes:
        for bom, name in (
            (codecs.BOM_UTF32_LE, "UTF-32"),
            (codecs.BOM_UTF32_BE, "UTF-32"),
            (codecs.BOM_UTF16_LE, "UTF-16"),
            (codecs.BOM_UTF16_BE, "UTF-16"),
        ):
            if raw.startswith(bom):
                raise self.error(1, 1, f"the file is {name} (byte order mark): write the capture as UTF-8")
        return raw.removeprefix(codecs.BOM_UTF8)

    def _decode(self, data: bytes, first_line: int) -> Iterator[tuple[int, Any]]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = first_line + data.count(b"\n", 0, exc.start)
            col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            raise self.error(line, col, f"not UTF-8 (byte 0x{data[exc.start]:02x})") from None
        decoder = json.JSONDecoder()
        index = 0
        while True:
            while index < len(text) and text[index].isspace():
                index += 1
            if index >= len(text):
                return
            try:
                document, end = decoder.raw_decode(text, index)
            except json.JSONDecodeError as exc:
                raise self.error(first_line + exc.lineno - 1, exc.colno, f"not JSON: {exc.msg}") from None
            except RecursionError:
                raise self.error(first_line, 1, "nested too deeply: not a capture") from None
            except ValueError as exc:  # e.g. an integer of more digits than Python converts
                raise self.error(first_line, 1, f"not JSON: {exc}") from None
            yield first_line + text.count("\n", 0, index), document
            index = end

    # -- records ---------------------------------------------------------------------------------

    def _records_of(self, document: Any, line: int) -> Iterator[CapturedSpan | CapturedMetric]:
        if isinstance(document, dict):
            if "resourceSpans" in document:
                yield from self._otlp(
                    document, line, "resourceSpans", "scopeSpans", "spans", self._otlp_span, _fast_otlp_span
                )
                return
            if "resourceMetrics" in document:
                yield from self._otlp(
                    document, line, "resourceMetrics", "scopeMetrics", "metrics", self._otlp_metric
                )
                return
            if "resource_metrics" in document:
                yield from self._console_metrics(document, line)
                return
            if "context" in document and "name" in document:
                yield self._checked(line, "", lambda source: _console_span(_Obj(document, ""), source))
                return
        what = type(document).__name__ if not isinstance(document, dict) else "an object"
        kind = {"list": "an array", "str": "a string", "int": "a number", "float": "a number"}.get(what, what)
        raise self.error(
            line,
            1,
            f"{kind} that is neither OTLP JSON (resourceSpans, resourceMetrics) nor console-exporter "
            "output (spans, resource_metrics)",
        )

    def _checked(self, line: int, where: str, build: Any) -> CapturedSpan | CapturedMetric:
        self.record += 1
        source = f"{self.path}:{line}: record {self.record}"
        try:
            result: CapturedSpan | CapturedMetric = build(source)
        except _Malformed as exc:
            at = exc.where or where
            raise self.error(
                line, 1, f"record {self.record}{f' ({at})' if at else ''}: {exc.message}"
            ) from None
        return result

    def _otlp(
        self,
        document: dict[str, Any],
        line: int,
        top: str,
        middle: str,
        leaf: str,
        build: Any,
        fast: Any = None,
    ) -> Any:
        """The records of an OTLP request; ``fast`` (spans) decodes a well-formed record with cheap
        checks, or returns None and ``build`` reads it field by field, naming what is wrong."""
        try:
            resources = _Obj(document, "").array(top)
        except _Malformed as exc:
            raise self.error(line, 1, f"{exc.where}: {exc.message}") from None
        for resource in resources:
            try:
                attrs = _otlp_attributes(resource.obj("resource", optional=True).array("attributes"))
                scopes = resource.array(middle)
            except _Malformed as exc:
                raise self.error(line, 1, f"{exc.where}: {exc.message}") from None
            for scope in scopes:
                try:
                    scope_name = scope.obj("scope", optional=True).string("name")
                    items = scope.raw_array(leaf)
                except _Malformed as exc:
                    raise self.error(line, 1, f"{exc.where}: {exc.message}") from None
                where = scope._at(leaf)
                prefix = f"{self.path}:{line}: record "
                fast_path = fast if self.fast else None
                for index, value in enumerate(items):
                    if fast_path is not None:
                        record = fast_path(value, attrs, scope_name, f"{prefix}{self.record + 1}")
                        if record is not None:
                            self.record += 1
                            yield record
                            continue
                    # not a well-formed record (or not a span): read it field by field, which says why
                    item = _Obj(value, f"{where}[{index}]")
                    yield self._checked(
                        line,
                        item.where,
                        lambda source, item=item, attrs=attrs, scope=scope_name: build(
                            item, attrs, scope, source
                        ),
                    )

    @staticmethod
    def _otlp_span(raw: _Obj, resource: dict[str, Any], scope: str, source: str) -> CapturedSpan:
        if not isinstance(raw.value, dict):
            raise _Malformed(raw.where, f"a span must be an object, not {_type(raw.value)}")
        name = raw.string("name", required=True)
        trace_id = raw.hex_id("traceId", 32)
        span_id = raw.hex_id("spanId", 16)
        parent = raw.hex_id("parentSpanId", 16, optional=True)
        start, end = raw.nanos("startTimeUnixNano"), raw.nanos("endTimeUnixNano")
        if start and not end:
            raise _Malformed(raw._at("endTimeUnixNano"), f"span '{name}' has a start time and no end time")
        if end < start:
            raise _Malformed(raw.where, f"span '{name}' ends before it starts ({end} < {start})")
        status = raw.obj("status", optional=True)
        return CapturedSpan(
            name,
            trace_id,
            span_id,
            parent,
            start,
            end,
            _otlp_attributes(raw.array("attributes")),
            resource,
            tuple(
                CapturedLink(
                    link.hex_id("traceId", 32),
                    link.hex_id("spanId", 16),
                    _otlp_attributes(link.array("attributes")),
                )
                for link in raw.array("links")
            ),
            tuple(
                CapturedEvent(
                    e.string("name"), e.nanos("timeUnixNano"), _otlp_attributes(e.array("attributes"))
                )
                for e in raw.array("events")
            ),
            status.enum("code", STATUS_CODES, "STATUS_CODE_"),
            status.string("message"),
            raw.enum("kind", SPAN_KINDS, "SPAN_KIND_", default="INTERNAL"),
            scope,
            source,
        )

    @staticmethod
    def _otlp_metric(raw: _Obj, resource: dict[str, Any], scope: str, source: str) -> CapturedMetric:
        if not isinstance(raw.value, dict):
            raise _Malformed(raw.where, f"a metric must be an object, not {_type(raw.value)}")
        name = raw.string("name", required=True)
        kinds = [
            k for k in ("histogram", "sum", "gauge", "exponentialHistogram", "summary") if k in raw.value
        ]
        if len(kinds) != 1:
            raise _Malformed(
                raw.where,
                f"metric '{name}' must hold one of histogram, sum, gauge, exponentialHistogram, summary",
            )
        points = tuple(_otlp_point(p) for p in raw.obj(kinds[0]).array("dataPoints"))
        return CapturedMetric(name, raw.string("unit"), kinds[0], points, resource, scope, source)

    def _console_metrics(self, document: dict[str, Any], line: int) -> Iterator[CapturedMetric]:
        try:
            resources = _Obj(document, "").array("resource_metrics")
        except _Malformed as exc:
            raise self.error(line, 1, f"{exc.where}: {exc.message}") from None
        for resource in resources:
            try:
                attrs = _console_attributes(
                    resource.obj("resource", optional=True).obj("attributes", optional=True)
                )
                scopes = resource.array("scope_metrics")
            except _Malformed as exc:
                raise self.error(line, 1, f"{exc.where}: {exc.message}") from None
            for scope in scopes:
                try:
                    scope_name = scope.obj("scope", optional=True).string("name")
                    items = scope.array("metrics")
                except _Malformed as exc:
                    raise self.error(line, 1, f"{exc.where}: {exc.message}") from None
                for item in items:
                    metric = self._checked(
                        line,
                        item.where,
                        lambda source, item=item, attrs=attrs, scope=scope_name: _console_metric(
                            item, attrs, scope, source
                        ),
                    )
                    assert isinstance(metric, CapturedMetric)
                    yield metric


# -- typed access to one JSON object, with the path of each value for the message -----------------


def _type(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    """A value as the capture spells it (JSON), cut short; arrays and objects by their type."""
    if isinstance(value, (dict, list)):
        return _type(value)
    text = json.dumps(value)
    if len(text) <= 40:
        return text
    return text[:36] + ('..."' if text.startswith('"') else "...")


_HEX = re.compile(r"[0-9a-fA-F]*")


class _Obj:
    """A JSON value and where it is in its document (``resourceSpans[0].scopeSpans[1].spans[4]``)."""

    def __init__(self, value: Any, where: str) -> None:
        self.value = value
        self.where = where

    def _at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str) -> Any:
        if not isinstance(self.value, dict):
            raise _Malformed(self.where, f"must be an object, not {_type(self.value)}")
        return self.value.get(key)

    def obj(self, key: str, optional: bool = False) -> _Obj:
        value = self.get(key)
        if value is None and optional:
            return _Obj({}, self._at(key))
        if not isinstance(value, dict):
            raise _Malformed(self._at(key), f"must be an object, not {_type(value)}")
        return _Obj(value, self._at(key))

    def raw_array(self, key: str) -> list[Any]:
        value = self.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise _Malformed(self._at(key), f"must be an array, not {_type(value)}")
        return value

    def array(self, key: str) -> list[_Obj]:
        where = self._at(key)
        return [_Obj(item, f"{where}[{i}]") for i, item in enumerate(self.raw_array(key))]

    def string(self, key: str, required: bool = False) -> str:
        value = self.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            what = "an empty string" if value == "" else _type(value)
            raise _Malformed(
                self._at(key),
                f"must be a non-empty string, not {what}" if required else f"must be a string, not {what}",
            )
        return value

    def hex_id(self, key: str, digits: int, optional: bool = False) -> Any:
        value = self.get(key)
        if optional and value in (None, "", "0x"):
            return None
        return _hex_id(value, digits, self._at(key))

    def nanos(self, key: str) -> int:
        return _nanos(self.get(key), self._at(key))

    def enum(self, key: str, names: tuple[str, ...], prefix: str, default: str | None = None) -> str:
        value = self.get(key)
        if value is None:
            return default or names[0]
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
            return names[value]
        if isinstance(value, str) and value.removeprefix(prefix) in names:
            return value.removeprefix(prefix)
        valid = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
        raise _Malformed(self._at(key), f"{_show(value)} is not one of {valid}")


def _hex_id(value: Any, digits: int, where: str) -> str:
    if not isinstance(value, str):
        raise _Malformed(where, f"must be a {digits}-digit hex string, not {_type(value)}")
    text = value.removeprefix("0x")
    if len(text) != digits or not _HEX.fullmatch(text):
        raise _Malformed(where, f"{_show(value)} is not {digits} hex digits")
    if not text.strip("0"):
        raise _Malformed(where, f"{_show(value)} is all zeros (an invalid id)")
    return text.lower()


_MAX_NS = 2**64 - 1


def _nanos(value: Any, where: str, what: str = "a time in nanoseconds") -> int:
    """A fixed64 (a time) in OTLP JSON: a number or a decimal string; absent means 0 (proto3)."""
    if value is None:
        return 0
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        raise _Malformed(where, f"{_show(value)} is not {what} (a number or a decimal string)")
    if not 0 <= number <= _MAX_NS:
        raise _Malformed(where, f"{number} is out of range for {what}")
    return number


def _otlp_value(raw: _Obj) -> Any:
    value = raw.value
    if not isinstance(value, dict):
        raise _Malformed(raw.where, f"an attribute value must be an object (AnyValue), not {_type(value)}")
    if "stringValue" in value:
        return raw.string("stringValue")
    if "boolValue" in value:
        if not isinstance(value["boolValue"], bool):
            raise _Malformed(raw._at("boolValue"), f"must be a boolean, not {_type(value['boolValue'])}")
        return value["boolValue"]
    if "intValue" in value:
        number = value["intValue"]
        if isinstance(number, str) and re.fullmatch(r"-?[0-9]{1,20}", number):
            return int(number)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
        raise _Malformed(
            raw._at("intValue"), f"{_show(number)} is not an integer (a number or a decimal string)"
        )
    if "doubleValue" in value:
        number = value["doubleValue"]
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return _to_float(number, raw._at("doubleValue"))
        if isinstance(number, str) and number in ("NaN", "Infinity", "-Infinity"):
            return float(number)
        raise _Malformed(raw._at("doubleValue"), f"{_show(number)} is not a number")
    if "arrayValue" in value:
        return [_otlp_value(v) for v in raw.obj("arrayValue").array("values")]
    if "kvlistValue" in value:
        return _otlp_attributes(raw.obj("kvlistValue").array("values"))
    if "bytesValue" in value:
        return raw.string("bytesValue")
    return None


def _otlp_attributes(items: list[_Obj]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key = item.string("key", required=True)
        out[key] = _otlp_value(item.obj("value", optional=True))
    return out


def _number(raw: _Obj, key: str) -> int | float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return int(value) if re.fullmatch(r"-?[0-9]{1,20}", value) else float(value)
        except ValueError:
            pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise _Malformed(raw._at(key), f"{_show(value)} is not a number")


def _count(raw: _Obj, key: str) -> int | None:
    value = _number(raw, key)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Malformed(raw._at(key), f"{_show(raw.get(key))} is not a count")
        return int(value)
    return value


def _to_float(value: float, where: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise _Malformed(where, f"{_show(value)} is out of range for a double") from None


def _float(raw: _Obj) -> float:
    value = raw.value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _to_float(value, raw.where)
    raise _Malformed(raw.where, f"{_show(value)} is not a number")


def _otlp_point(raw: _Obj) -> CapturedPoint:
    if not isinstance(raw.value, dict):
        raise _Malformed(raw.where, f"a data point must be an object, not {_type(raw.value)}")
    value = _number(raw, "asDouble")
    value = _number(raw, "asInt") if value is None else value
    count = _count(raw, "count")
    total = _number(raw, "sum")
    return CapturedPoint(
        _otlp_attributes(raw.array("attributes")),
        raw.nanos("startTimeUnixNano"),
        raw.nanos("timeUnixNano"),
        value,
        count,
        _to_float(total, raw._at("sum")) if total is not None else None,
        tuple(_nanos(c.value, c.where, "a count") for c in raw.array("bucketCounts")),
        tuple(_float(b) for b in raw.array("explicitBounds")),
    )


# -- the console exporters -------------------------------------------------------------------------


def _console_attributes(raw: _Obj) -> dict[str, Any]:
    value = raw.value
    if not isinstance(value, dict):
        raise _Malformed(raw.where, f"must be an object, not {_type(value)}")
    return dict(value)


def _iso_nanos(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.UTC)
            delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
            return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
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


# -- the fast path: a well-formed OTLP span decoded with cheap checks on the parsed JSON -------------
#
# Every check of the checked path (``_File._otlp_span``) holds for what these accept, and they give
# the same values; anything else (a wrong type, an upper-case or 0x id, a float time, a negative
# integer, an end before the start...) returns None and the caller reads that record through the
# checked path, which names the field and what is wrong with it.

_TRACE_ID = re.compile("[0-9a-f]{32}").fullmatch  # lower case: the checked path would lower() it
_SPAN_ID = re.compile("[0-9a-f]{16}").fullmatch
_NO_PARENT = (None, "", "0x")
_STATUS_NAMES = {**{n: n for n in STATUS_CODES}, **{f"STATUS_CODE_{n}": n for n in STATUS_CODES}}
_KIND_NAMES = {**{n: n for n in SPAN_KINDS}, **{f"SPAN_KIND_{n}": n for n in SPAN_KINDS}}
_INVALID: Any = object()
_new = object.__new__
_set = object.__setattr__


def _fast_value(value: Any) -> Any:
    """An AnyValue (a dict) as ``_otlp_value`` reads it, or ``_INVALID``."""
    if "stringValue" in value:
        text = value["stringValue"]
        if text.__class__ is str:
            return text
        return "" if text is None else _INVALID
    if "boolValue" not in value:
        if "intValue" in value:
            number = value["intValue"]
            if number.__class__ is str and len(number) <= 20 and number.isdigit() and number.isascii():
                return int(number)
            if number.__class__ is int:
                return number
        elif "doubleValue" in value:
            number = value["doubleValue"]
            if number.__class__ is float:
                return number
    try:  # booleans, arrays, kvlists, bytes, negative integers, integer doubles, "NaN"...: the checked way
        return _otlp_value(_Obj(value, ""))
    except _Malformed:
        return _INVALID


def _fast_attributes(items: Any) -> Any:
    """The attributes (a list of KeyValue, or None) as ``_otlp_attributes`` reads them, or ``_INVALID``."""
    if items is None:
        return {}
    if items.__class__ is not list:
        return _INVALID
    out: dict[str, Any] = {}
    for item in items:
        if item.__class__ is not dict:
            return _INVALID
        key = item.get("key")
        value = item.get("value")
        if key.__class__ is not str or not key:
            return _INVALID
        if value.__class__ is dict:
            value = _fast_value(value)
            if value is _INVALID:
                return _INVALID
        elif value is not None:
            return _INVALID
        out[key] = value
    return out


_NO_TRACE = "0" * 32
_NO_SPAN = "0" * 16


def _fast_ids(trace_id: Any, span_id: Any) -> bool:
    return (
        trace_id.__class__ is str
        and span_id.__class__ is str
        and _TRACE_ID(trace_id) is not None
        and _SPAN_ID(span_id) is not None
        and trace_id != _NO_TRACE
        and span_id != _NO_SPAN
    )


def _fast_nanos(value: Any) -> int:
    """A time as ``_nanos`` reads it (absent: 0), or -1."""
    if value.__class__ is str:
        if len(value) < 20 and value.isdigit() and value.isascii():  # under 10**19 < 2**64
            return int(value)
    elif value.__class__ is int:
        if 0 <= value <= _MAX_NS:
            return value
    elif value is None:
        return 0
    return -1


def _fast_links(items: Any) -> Any:
    if items is None:
        return ()
    if items.__class__ is not list:
        return _INVALID
    links = []
    for item in items:
        if item.__class__ is not dict:
            return _INVALID
        trace_id, span_id = item.get("traceId"), item.get("spanId")
        attributes = _fast_attributes(item.get("attributes"))
        if not _fast_ids(trace_id, span_id) or attributes is _INVALID:
            return _INVALID
        link = _new(CapturedLink)
        _set(link, "__dict__", {"trace_id": trace_id, "span_id": span_id, "attributes": attributes})
        links.append(link)
    return tuple(links)


def _fast_events(items: Any) -> Any:
    if items is None:
        return ()
    if items.__class__ is not list:
        return _INVALID
    events = []
    for item in items:
        if item.__class__ is not dict:
            return _INVALID
        name = item.get("name")
        time = _fast_nanos(item.get("timeUnixNano"))
        attributes = _fast_attributes(item.get("attributes"))
        if name is None:
            name = ""
        if name.__class__ is not str or time < 0 or attributes is _INVALID:
            return _INVALID
        event = _new(CapturedEvent)
        _set(event, "__dict__", {"name": name, "time_ns": time, "attributes": attributes})
        events.append(event)
    return tuple(events)


def _fast_otlp_span(span: Any, resource: dict[str, Any], scope: str, source: str) -> CapturedSpan | None:
    """The span of a well-formed OTLP span record, as ``_File._otlp_span`` reads it; None otherwise."""
    if span.__class__ is not dict:
        return None
    get = span.get
    name = get("name")
    trace_id = get("traceId")
    span_id = get("spanId")
    parent = get("parentSpanId")
    start = get("startTimeUnixNano")
    end = get("endTimeUnixNano")
    if (
        name.__class__ is not str
        or not name
        or trace_id.__class__ is not str
        or span_id.__class__ is not str
        or _TRACE_ID(trace_id) is None
        or _SPAN_ID(span_id) is None
        or trace_id == _NO_TRACE
        or span_id == _NO_SPAN
    ):
        return None
    if parent in _NO_PARENT:
        parent = None
    elif parent.__class__ is not str or _SPAN_ID(parent) is None or parent == _NO_SPAN:
        return None
    # times: decimal strings (as the collector writes them) of under 20 digits, inline; else the call
    if start.__class__ is str and len(start) < 20 and start.isdigit() and start.isascii():
        start = int(start)
    else:
        start = _fast_nanos(start)
    if end.__class__ is str and len(end) < 20 and end.isdigit() and end.isascii():
        end = int(end)
    else:
        end = _fast_nanos(end)
    if start < 0 or end < start or not end:  # not a time; ends before it starts; no end time
        return None
    status = get("status")
    code: Any
    message: Any
    if status is None or status.__class__ is dict and not status:
        code, message = "UNSET", ""
    elif status.__class__ is dict:
        code, message = status.get("code"), status.get("message")
        if code is None:
            code = "UNSET"
        elif code.__class__ is int and 0 <= code < len(STATUS_CODES):
            code = STATUS_CODES[code]
        elif code.__class__ is str and code in _STATUS_NAMES:
            code = _STATUS_NAMES[code]
        else:
            return None
        if message is None:
            message = ""
        elif message.__class__ is not str:
            return None
    else:
        return None
    kind = get("kind")
    if kind is None:
        kind = "INTERNAL"
    elif kind.__class__ is int and 0 <= kind < len(SPAN_KINDS):
        kind = SPAN_KINDS[kind]
    elif kind.__class__ is str and kind in _KIND_NAMES:
        kind = _KIND_NAMES[kind]
    else:
        return None
    attributes = _fast_attributes(get("attributes"))
    links = get("links")  # mostly empty or absent: no call then
    links = _fast_links(links) if links else () if links is None or links.__class__ is list else _INVALID
    events = get("events")
    events = (
        _fast_events(events) if events else () if events is None or events.__class__ is list else _INVALID
    )
    if attributes is _INVALID or links is _INVALID or events is _INVALID:
        return None
    record = _new(CapturedSpan)
    _set(
        record,
        "__dict__",
        {
            "name": name,
            "trace_id": trace_id,
            "span_id": span_id,
            "parent_id": parent,
            "start_ns": start,
            "end_ns": end,
            "attributes": attributes,
            "resource": resource,
            "links": links,
            "events": events,
            "status": code,
            "status_message": message,
            "kind": kind,
            "scope": scope,
            "source": source,
        },
    )
    return record
