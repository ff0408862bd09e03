"""The report's reading of capture files, behind the shared reader's planned API.

``codegen/capture.py`` (owner: helper ``hostile``) is to be the one reader of capture files, with
``iter_records(paths) -> Iterator[CapturedSpan | CapturedMetric]`` and ``CaptureError``. Until it
lands, this module implements that API for what the report needs (OTLP JSON lines or documents as
the collector's file exporter writes them, the SDK console exporter's stream of span objects),
streaming one document at a time. When the shared reader lands, this module shrinks to an import
of it: nothing else in ``codegen/report`` reads files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple


class CaptureError(Exception):
    """A capture cannot be read; the message says where (``path:line:col: error: ...``)."""


class CapturedLink(NamedTuple):
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


class CapturedSpan(NamedTuple):  # a tuple: a million of them are built in seconds
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: tuple[CapturedLink, ...] = ()
    status: str = "UNSET"  # "UNSET" / "OK" / "ERROR"
    kind: str = "INTERNAL"
    source: str = ""  # "path:line"


@dataclass(frozen=True)
class CapturedMetric:
    name: str
    unit: str
    kind: str
    resource: dict[str, Any]
    source: str = ""


STATUS = {0: "UNSET", 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK"}
STATUS.update({"STATUS_CODE_ERROR": "ERROR", "UNSET": "UNSET", "OK": "OK", "ERROR": "ERROR"})


def iter_records(
    paths: Iterable[Path], keep: frozenset[str] | None = None
) -> Iterator[CapturedSpan | CapturedMetric]:
    """Every span and metric stream of the captures, in file order, one document in memory at a time.

    ``keep``: only these span attribute keys are decoded (None: all); a large capture reads faster.
    Spans of one exported resource share one ``resource`` dict."""
    for path in paths:
        for line, document in _documents(Path(path)):
            yield from _records(document, f"{path}:{line}", keep)


def read_spans(paths: Iterable[Path]) -> list[CapturedSpan]:
    return [r for r in iter_records(paths) if isinstance(r, CapturedSpan)]


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    """(first line, JSON value) for each top-level JSON value of the file: one per line (OTLP JSON
    lines) or spread over several lines (an indented document, the console exporter's stream)."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise CaptureError(f"{path}: error: cannot read: {exc.strerror}") from None
    decoder = json.JSONDecoder()
    with handle:
        buffer = ""
        first = 0
        try:
            for number, line in enumerate(handle, 1):
                if not buffer:
                    if not line.strip():
                        continue
                    first = number
                buffer += line
                while buffer.strip():
                    text = buffer.lstrip()
                    try:
                        value, end = decoder.raw_decode(text)
                    except json.JSONDecodeError as exc:
                        if exc.pos >= len(text.rstrip()) or _unterminated(exc):
                            break  # the value goes on in the next lines
                        raise CaptureError(
                            f"{path}:{first + exc.lineno - 1}:{exc.colno}: error: not JSON: {exc.msg}"
                        ) from None
                    yield first, value
                    consumed = text[:end]
                    first += consumed.count("\n")
                    buffer = text[end:]
                    if not buffer.strip():
                        buffer = ""
        except UnicodeDecodeError as exc:
            raise CaptureError(f"{path}: error: not UTF-8 text ({exc.reason})") from None
        if buffer.strip():
            raise CaptureError(
                f"{path}:{first}:1: error: truncated JSON: the value starting here never ends "
                "(was the file cut off while it was written?)"
            )


def _unterminated(exc: json.JSONDecodeError) -> bool:
    return exc.msg.startswith("Unterminated string")


def _records(
    document: Any, where: str, keep: frozenset[str] | None
) -> Iterator[CapturedSpan | CapturedMetric]:
    if isinstance(document, dict) and "resourceSpans" in document:
        for resource in _list(document["resourceSpans"], where, "resourceSpans"):
            attrs = _attributes((resource.get("resource") or {}).get("attributes"), where)
            for scope in _list(resource.get("scopeSpans", []), where, "scopeSpans"):
                for raw in _list(scope.get("spans", []), where, "spans"):
                    yield _otlp_span(raw, attrs, where, keep)
    elif isinstance(document, dict) and "resourceMetrics" in document:
        for resource in _list(document["resourceMetrics"], where, "resourceMetrics"):
            attrs = _attributes((resource.get("resource") or {}).get("attributes"), where)
            for scope in _list(resource.get("scopeMetrics", []), where, "scopeMetrics"):
                for raw in _list(scope.get("metrics", []), where, "metrics"):
                    kind = next((k for k in ("histogram", "sum", "gauge") if k in raw), "")
                    yield CapturedMetric(
                        str(raw.get("name", "")), str(raw.get("unit", "")), kind, attrs, where
                    )
    elif isinstance(document, dict) and "context" in document and "name" in document:
        yield _console_span(document, where)
    else:
        raise CaptureError(
            f"{where}:1: error: neither OTLP JSON (resourceSpans, resourceMetrics) nor a console-exporter span"
        )


def _list(value: Any, where: str, key: str) -> list[Any]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise CaptureError(f"{where}:1: error: '{key}' is not a list of objects")
    return value


def _value(value: Any) -> Any:
    if not isinstance(value, dict):
        return None
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    if "arrayValue" in value:
        return [_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    return None


def _attributes(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise CaptureError(f"{where}:1: error: 'attributes' is not a list")
    return {str(a.get("key")): _value(a.get("value")) for a in raw if isinstance(a, dict)}


def _hex(value: Any) -> str:
    if value.__class__ is str and not value.startswith("0x"):
        return str(value)  # the common case: already plain hex
    return str(value or "").removeprefix("0x")


def _nanos(raw: dict[str, Any], key: str, name: str, where: str) -> int:
    value = raw.get(key)
    if value in (None, "", 0, "0"):
        what = "end" if key.startswith("end") else "start"
        raise CaptureError(f"{where}:1: error: span '{name}' has no {what} time ({key} missing)")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise CaptureError(f"{where}:1: error: span '{name}': {key} is {value!r}, not a number") from None


def _otlp_span(
    raw: dict[str, Any], resource: dict[str, Any], where: str, keep: frozenset[str] | None
) -> CapturedSpan:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise CaptureError(f"{where}:1: error: a span without a name")
    try:  # the common case, fast; anything odd is sorted out below with a message
        start = int(raw["startTimeUnixNano"])
        end = int(raw["endTimeUnixNano"])
        if not start or not end:
            raise ValueError
    except (KeyError, TypeError, ValueError):
        start = _nanos(raw, "startTimeUnixNano", name, where)
        end = _nanos(raw, "endTimeUnixNano", name, where)
    status = raw.get("status")
    links = raw.get("links")
    raw_attributes = raw.get("attributes")
    if keep is not None and isinstance(raw_attributes, list):
        raw_attributes = [a for a in raw_attributes if isinstance(a, dict) and a.get("key") in keep]
    parent = raw.get("parentSpanId")
    return CapturedSpan(
        name,
        _hex(raw.get("traceId")),
        _hex(raw.get("spanId")),
        _hex(parent) if parent else None,
        start,
        end,
        _attributes(raw_attributes, where) if raw_attributes else {},
        resource,
        tuple(
            CapturedLink(
                _hex(link.get("traceId")),
                _hex(link.get("spanId")),
                _attributes(link.get("attributes"), where),
            )
            for link in links
            if isinstance(link, dict)
        )
        if links
        else (),
        STATUS.get(status.get("code", 0), "UNSET") if status and isinstance(status, dict) else "UNSET",
        str(raw.get("kind", "INTERNAL")).removeprefix("SPAN_KIND_"),
        where,
    )


def _iso_nanos(value: Any, key: str, name: str, where: str) -> int:
    if not isinstance(value, str) or not value:
        raise CaptureError(f"{where}:1: error: span '{name}' has no {key}")
    text = value.rstrip("Z")
    whole, _, fraction = text.partition(".")
    try:
        moment = datetime.fromisoformat(whole).replace(tzinfo=UTC)
    except ValueError:
        raise CaptureError(f"{where}:1: error: span '{name}': {key} {value!r} is not an ISO time") from None
    digits = (fraction + "000000000")[:9] if fraction.isdigit() or not fraction else None
    if digits is None:
        raise CaptureError(f"{where}:1: error: span '{name}': {key} {value!r} is not an ISO time")
    return int(moment.timestamp()) * 1_000_000_000 + int(digits)


def _console_span(document: dict[str, Any], where: str) -> CapturedSpan:
    name = str(document["name"])
    context = document.get("context") or {}
    status = (document.get("status") or {}).get("status_code", "UNSET")
    links = tuple(
        CapturedLink(
            _hex((link.get("context") or {}).get("trace_id")),
            _hex((link.get("context") or {}).get("span_id")),
            dict(link.get("attributes") or {}),
        )
        for link in document.get("links") or []
        if isinstance(link, dict)
    )
    return CapturedSpan(
        name,
        _hex(context.get("trace_id")),
        _hex(context.get("span_id")),
        _hex(document.get("parent_id")) or None,
        _iso_nanos(document.get("start_time"), "start_time", name, where),
        _iso_nanos(document.get("end_time"), "end_time", name, where),
        dict(document.get("attributes") or {}),
        dict((document.get("resource") or {}).get("attributes") or {}),
        links,
        STATUS.get(status, "UNSET"),
        str(document.get("kind", "INTERNAL")).removeprefix("SpanKind."),
        where,
    )
