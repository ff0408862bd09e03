"""Documents: the files read as a stream, one JSON document in memory at a time, each told apart
(OTLP request or console object) and its records read; every malformed one a located error."""

from __future__ import annotations

import codecs
import json
import re
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from codegen.capture.console import _console_attributes, _console_metric, _console_span
from codegen.capture.fast import _fast_otlp_span
from codegen.capture.fields import _Obj, _otlp_attributes, _otlp_point, _type
from codegen.capture.records import (
    _CHUNK,
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    SPAN_KINDS,
    STATUS_CODES,
    CapturedEvent,
    CapturedLink,
    CapturedMetric,
    CapturedSpan,
    CaptureError,
    _Malformed,
)

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

    @contextmanager
    def _located(self, line: int) -> Iterator[None]:
        """A malformed structure (not a record) as the error of the document at ``line``."""
        try:
            yield
        except _Malformed as exc:
            raise self.error(line, 1, f"{exc.where}: {exc.message}") from None

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
        with self._located(line):
            resources = _Obj(document, "").array(top)
        for resource in resources:
            with self._located(line):
                attrs = _otlp_attributes(resource.obj("resource", optional=True).array("attributes"))
                scopes = resource.array(middle)
            for scope in scopes:
                with self._located(line):
                    scope_name = scope.obj("scope", optional=True).string("name")
                    items = scope.raw_array(leaf)
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
        with self._located(line):
            resources = _Obj(document, "").array("resource_metrics")
        for resource in resources:
            with self._located(line):
                attrs = _console_attributes(
                    resource.obj("resource", optional=True).obj("attributes", optional=True)
                )
                scopes = resource.array("scope_metrics")
            for scope in scopes:
                with self._located(line):
                    scope_name = scope.obj("scope", optional=True).string("name")
                    items = scope.array("metrics")
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
