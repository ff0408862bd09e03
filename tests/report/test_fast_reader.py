"""The capture reader's fast path gives exactly what its checked path gives, on every input.

``codegen/capture/fast.py`` decodes a well-formed OTLP span with cheap checks (``_fast_otlp_span``) and
sends anything else through the checked path, which names what is wrong; ``_File(path, fast=False)``
reads every record the checked way. These tests read the same files both ways and compare the
records (by ``repr``: types, values and order) and the error: the bad-capture corpus, the committed
real captures, a synthetic multi-rank capture and some thousand one-field mutations of a span that
uses every field. The line scanner that finds where a document ends (``_nesting``) is compared with
the plain token loop it replaced.
"""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from codegen.capture import MAX_DEPTH, CaptureError, _File, documents, fast
from tests.report.synthetic import write_capture
from tests.support.paths import REPORT_DATA as DATA

CORPUS = Path(__file__).resolve().parents[1] / "bad_captures"
BAD = sorted(p for p in CORPUS.iterdir() if p.suffix != ".expected")
GOOD = sorted(DATA.glob("*.jsonl"))


def _read(path: Path, fast: bool) -> list[str]:
    """Each record's repr, then the error if reading stops at one."""
    got: list[str] = []
    try:
        for record in _File(path, fast=fast).records():
            got.append(repr(record))
    except CaptureError as exc:
        got.append(f"error: {exc}")
    return got


def _same(path: Path) -> list[str]:
    fast, checked = _read(path, True), _read(path, False)
    assert fast == checked
    return fast


@pytest.mark.parametrize("case", BAD, ids=lambda p: p.name.split(".")[0])
def test_bad_capture_same_error(case: Path) -> None:
    assert _same(case)[-1].startswith("error: ")


@pytest.mark.parametrize("case", GOOD, ids=lambda p: p.name)
def test_real_capture_same_records(case: Path) -> None:
    records = _same(case)
    assert len(records) > 100 and not records[-1].startswith("error: ")


def test_synthetic_capture_same_records(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    spans = write_capture(path, ranks=2, iterations=30, save_every=10, eval_every=10)
    assert len(_same(path)) == spans


@pytest.mark.parametrize("case", [*GOOD, "synthetic"], ids=lambda p: getattr(p, "name", p))
def test_fast_path_reads_well_formed_spans(case: Path | str, tmp_path: Path, monkeypatch) -> None:
    """The fast path is taken: without the checked path every span of a good capture still reads."""
    if case == "synthetic":
        case = tmp_path / "capture.jsonl"
        write_capture(case, ranks=2, iterations=30, save_every=10, eval_every=10)
    assert isinstance(case, Path)
    expected = _read(case, False)

    def refuse(*args: Any) -> None:
        raise AssertionError(f"a well-formed span went the checked way: {args[0].where}")

    monkeypatch.setattr(_File, "_otlp_span", staticmethod(refuse))
    assert _read(case, True) == expected


# -- one field at a time -------------------------------------------------------------------------

_DELETE = object()
_TRACE, _SPAN = "5" * 32, "00000000000000aa"

_RICH: dict[str, Any] = {
    "traceId": _TRACE,
    "spanId": _SPAN,
    "parentSpanId": "00000000000000a9",
    "name": "demo.step",
    "kind": 1,
    "startTimeUnixNano": "1000",
    "endTimeUnixNano": "2500",
    "attributes": [
        {"key": "group", "value": {"stringValue": "step"}},
        {"key": "number", "value": {"intValue": "7"}},
        {"key": "ratio", "value": {"doubleValue": 1.5}},
        {"key": "flag", "value": {"boolValue": True}},
        {"key": "list", "value": {"arrayValue": {"values": [{"intValue": 0}, {"stringValue": "a"}]}}},
        {"key": "map", "value": {"kvlistValue": {"values": [{"key": "tp", "value": {"intValue": "2"}}]}}},
        {"key": "blob", "value": {"bytesValue": "aGk="}},
        {"key": "empty", "value": {}},
    ],
    "events": [
        {"timeUnixNano": "1500", "name": "checkpoint", "attributes": [{"key": "k", "value": {"intValue": 3}}]}
    ],
    "links": [{"traceId": "6" * 32, "spanId": "00000000000000bb", "attributes": []}],
    "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
}

# where in the span a value goes (keys and list indexes)
_PATHS: list[tuple[Any, ...]] = [
    *((key,) for key in _RICH),
    ("status", "code"),
    ("status", "message"),
    *(("attributes", i, part) for i in range(len(_RICH["attributes"])) for part in ("key", "value")),
    ("attributes", 0, "value", "stringValue"),
    ("attributes", 1, "value", "intValue"),
    ("attributes", 2, "value", "doubleValue"),
    ("attributes", 3, "value", "boolValue"),
    ("attributes", 4, "value", "arrayValue"),
    ("attributes", 5, "value", "kvlistValue"),
    ("attributes", 0),
    ("events", 0),
    ("events", 0, "name"),
    ("events", 0, "timeUnixNano"),
    ("events", 0, "attributes"),
    ("events", 0, "attributes", 0, "value"),
    ("links", 0),
    ("links", 0, "traceId"),
    ("links", 0, "spanId"),
    ("links", 0, "attributes"),
]

# what goes there: every JSON type, near-misses of ids, times and enums, values that read alike
_VALUES: list[Any] = [
    _DELETE, None, True, False, 0, 1, -1, 2, 5, 6, 1.0, 1.5, -0.0, 2**63, 2**64 - 1, 2**64, 10**400,
    float("nan"), float("inf"), "", "0x", "0", "1000", "1500", "3000", "-5", "+5", " 5", "5 ",
    "1e3", "NaN", "Infinity", "\u0661\u0662", "\u00b2", "9" * 19, "9" * 20, "18446744073709551615",
    "18446744073709551616", "0" * 16, "0" * 32, "a" * 16, "A" * 16, "0x" + "a" * 16, "g" * 16, "a" * 15,
    "a" * 7 + "-" + "a" * 8, "a" * 15 + "\u00e9", "a" * 15 + "\uff41", "a" * 32, "A" * 32, "a" * 15 + "-" + "a" * 16, "0x" + "a" * 32, "Aa" * 16, "a" * 31, "OK", "ERROR", "UNSET", "STATUS_CODE_OK",
    "STATUS_CODE_UNSET", "SERVER", "SPAN_KIND_CLIENT", "UNSPECIFIED", "STATUS_CODE_STATUS_CODE_OK",
    "demo.step", [], [{}], [None], [1], {}, {"x": 1},
    {"stringValue": None}, {"stringValue": 3}, {"intValue": "12"}, {"intValue": "-12"},
    {"intValue": "123456789012345678901"}, {"intValue": 12.0}, {"intValue": True}, {"doubleValue": 3},
    {"doubleValue": "NaN"}, {"doubleValue": 10**400}, {"doubleValue": True}, {"boolValue": 1},
    {"boolValue": False, "intValue": "1"}, {"stringValue": "x", "intValue": "1"}, {"intValue": "x", "doubleValue": 1.0},
    {"bytesValue": 1}, {"arrayValue": []}, {"arrayValue": {"values": [{"boolValue": "no"}]}},
    {"kvlistValue": {"values": [{"key": ""}]}}, {"key": "k"}, {"key": "k", "value": None}, {"key": 1, "value": {}},
    {"code": 1}, {"code": None, "message": None}, {"message": 3}, {"code": "OK", "message": ""},
    {"traceId": "6" * 32, "spanId": "b" * 16}, {"name": "e", "timeUnixNano": 7},
]  # fmt: skip


def _mutated(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    span = copy.deepcopy(_RICH)
    holder: Any = span
    for step in path[:-1]:
        holder = holder[step]
    if value is _DELETE:
        if isinstance(holder, list):
            del holder[path[-1]]
        else:
            holder.pop(path[-1], None)
    else:
        holder[path[-1]] = copy.deepcopy(value)
    return span


def _document(*spans: dict[str, Any]) -> str:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "train"}}]}
    scope = {"scope": {"name": "megatron"}, "spans": list(spans)}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}) + "\n"


@pytest.mark.parametrize("where", _PATHS, ids=lambda path: ".".join(map(str, path)))
def test_one_field_mutations_read_alike(where: tuple[Any, ...], tmp_path: Path) -> None:
    good = dict(_RICH, spanId="00000000000000a9", parentSpanId="")
    path = tmp_path / "c.json"
    outcomes = {"records": 0, "errors": 0}
    for value in _VALUES:
        path.write_text(_document(good, _mutated(where, value), good))
        fast, checked = _read(path, True), _read(path, False)
        assert fast == checked, value
        outcomes["errors" if fast[-1].startswith("error: ") else "records"] += 1
    # both outcomes: the mutations reach the checks, and some pass them
    assert outcomes["records"] and outcomes["errors"], outcomes


def test_rich_span_takes_the_fast_path() -> None:
    span = fast._fast_otlp_span(_RICH, {}, "megatron", "c.json:1: record 1")
    assert span is not None and span.status == "ERROR" and span.attributes["map"] == {"tp": 2}


# -- where a document ends ---------------------------------------------------------------------------

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"?|[{}\[\]]')


def _reference(raw: bytes, depth: int) -> tuple[int, int]:
    """(deepest, final) nesting by the token loop the reader used before ``_nesting``."""
    deepest = depth
    for token in _TOKEN.findall(raw):
        if token in (b"{", b"["):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"}", b"]"):
            depth -= 1
    return deepest, depth


def test_nesting_matches_the_token_loop() -> None:
    rnd = random.Random(19)
    alphabet = b'{}[]"\\\\ ax\n\r\t\xff'

    def nested(depth: int) -> bytes:
        if depth == 0:
            return rnd.choice([b"1", b'"s"', b'"[{"', b'"]"', b"{}", b"[]", b'"a\\"["', b'"\\\\"'])
        bracket = rnd.choice([b"[", b"{"])
        inner = b",".join(nested(rnd.randrange(0, min(depth, 3))) for _ in range(rnd.randrange(0, 3)))
        return bracket + inner + b"," + nested(depth - 1) + (b"]" if bracket == b"[" else b"}")

    deep = 0
    for i in range(6_000):
        if i % 3 == 0:
            raw, depth = nested(rnd.randrange(0, 70)), 0
            if rnd.random() < 0.3:
                k = rnd.randrange(len(raw))
                raw = raw[:k] + bytes([rnd.choice(alphabet)]) + raw[k + 1 :]
        else:
            raw = bytes(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 40)))
            depth = rnd.choice([0, 0, rnd.randrange(-3, 70)])
        expected, got = _reference(raw, depth), documents._nesting(raw, depth)
        assert got[1] == expected[1], (raw, depth)
        # deepest: exact past the limit, else at least the real depth (the limit is all it is for)
        assert got[0] >= expected[0] and (got[0] > MAX_DEPTH) == (expected[0] > MAX_DEPTH), (raw, depth)
        deep += expected[0] > MAX_DEPTH
    assert deep > 20  # the limit is reached, and found
