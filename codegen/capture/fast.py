"""The fast path: a well-formed OTLP span decoded with cheap checks on the parsed JSON (anything
it does not accept goes through the checked path, ``fields``)."""

from __future__ import annotations

import re
from typing import Any

from codegen.capture.fields import _MAX_NS, _Obj, _otlp_value
from codegen.capture.records import (
    SPAN_KINDS,
    STATUS_CODES,
    CapturedEvent,
    CapturedLink,
    CapturedSpan,
    _Malformed,
)

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
