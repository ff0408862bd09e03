"""Typed access to one JSON object, with the path of each value for the message; OTLP values,
attributes and data points read through it (the checked path)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from codegen.capture.records import CapturedPoint, _Malformed


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
