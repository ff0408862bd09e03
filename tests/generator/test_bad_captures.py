"""The bad-capture corpus and the capture reader: hostile capture files end in one located error.

A case is ``tests/bad_captures/<case>.<ext>`` (any bytes: the cases include binary, non-UTF-8 and
UTF-16 files, which cannot hold a comment) with a sidecar ``<case>.expected`` holding the one
expected error as ``LINE:COL: start of the message``. ``codegen verify`` on every case must exit 3
with exactly that one ``path:LINE:COL: error: ...`` line on stderr, no traceback and nothing on
stdout (no findings: a malformed record is an error, not a finding).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from codegen.capture import (
    CapturedEvent,
    CapturedLink,
    CapturedMetric,
    CapturedSpan,
    CaptureError,
    iter_records,
    read_metrics,
    read_spans,
)
from codegen.capture import documents as capture_documents
from codegen.cli import main

CORPUS = Path(__file__).resolve().parents[1] / "bad_captures"
SPECS = Path(__file__).resolve().parents[2] / "specs"
CASES = sorted(p for p in CORPUS.iterdir() if p.suffix != ".expected")
TRACE = "5" * 32


def test_corpus_is_large_enough_and_every_case_has_its_expectation() -> None:
    assert len(CASES) >= 40
    assert {p.name.split(".")[0] for p in CASES} == {p.stem for p in CORPUS.glob("*.expected")}


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name.split(".")[0])
def test_bad_capture(case: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = case.with_name(case.name.split(".")[0] + ".expected").read_text(encoding="utf-8").strip()
    line_col, message = expected.split(": ", 1)
    code = main(["verify", str(SPECS), str(case)])
    out, err = capsys.readouterr()
    assert code == 3, err
    assert "Traceback" not in err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{case}:{line_col}: error: {message}"), err


# -- what a good capture gives -----------------------------------------------------------------


def _span(**over: object) -> dict[str, object]:
    span: dict[str, object] = {
        "traceId": TRACE,
        "spanId": "00000000000000aa",
        "name": "demo.step",
        "kind": 1,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": 2500,
        "attributes": [
            {"key": "megatron.span_group", "value": {"stringValue": "step"}},
            {"key": "thread.id", "value": {"intValue": "7"}},
            {"key": "ranks", "value": {"arrayValue": {"values": [{"intValue": 0}, {"intValue": "1"}]}}},
            {"key": "cfg", "value": {"kvlistValue": {"values": [{"key": "tp", "value": {"intValue": "2"}}]}}},
            {"key": "loss", "value": {"doubleValue": 1.5}},
            {"key": "ok", "value": {"boolValue": True}},
        ],
        "events": [{"timeUnixNano": "1500", "name": "checkpoint", "attributes": []}],
        "links": [{"traceId": "6" * 32, "spanId": "00000000000000BB", "attributes": []}],
        "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
    }
    span.update(over)
    return span


def _otlp(*spans: dict[str, object]) -> str:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "train"}}]}
    scope = {"scope": {"name": "megatron"}, "spans": list(spans)}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]})


def test_otlp_span_is_read_in_full(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    child = _span(
        spanId="00000000000000cc", parentSpanId="00000000000000aa", kind="SPAN_KIND_CLIENT", status={}
    )
    path.write_text(_otlp(_span(), child) + "\n", encoding="utf-8")
    first, second = read_spans(path)
    assert first == CapturedSpan(
        name="demo.step",
        trace_id=TRACE,
        span_id="00000000000000aa",
        parent_id=None,
        start_ns=1000,
        end_ns=2500,
        attributes={
            "megatron.span_group": "step",
            "thread.id": 7,
            "ranks": [0, 1],
            "cfg": {"tp": 2},
            "loss": 1.5,
            "ok": True,
        },
        resource={"service.name": "train"},
        links=(CapturedLink("6" * 32, "00000000000000bb", {}),),
        events=(CapturedEvent("checkpoint", 1500, {}),),
        status="ERROR",
        status_message="boom",
        kind="INTERNAL",
        scope="megatron",
        source=f"{path}:1: record 1",
    )
    assert first.thread_id == 7 and first.duration_ns == 1500
    assert (second.parent_id, second.kind, second.status, second.source) == (
        "00000000000000aa",
        "CLIENT",
        "UNSET",
        f"{path}:1: record 2",
    )


def test_console_span_and_metrics_are_read(tmp_path: Path) -> None:
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("outer") as outer, tracer.start_as_current_span("inner") as inner:
        inner.set_attribute("k", [1, 2])
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("m")
    meter.create_histogram("demo.loss", unit="1").record(1.5)
    meter.create_counter("demo.tokens").add(3)
    data = reader.get_metrics_data()
    assert data is not None
    path = tmp_path / "console.json"
    path.write_text(inner.to_json() + "\n" + outer.to_json() + "\n" + data.to_json() + "\n", encoding="utf-8")

    records = list(iter_records(path))
    spans = [r for r in records if isinstance(r, CapturedSpan)]
    assert [s.name for s in spans] == ["inner", "outer"]
    assert spans[0].parent_id == spans[1].span_id == f"{outer.get_span_context().span_id:016x}"
    assert spans[0].trace_id == f"{outer.get_span_context().trace_id:032x}"
    assert spans[0].attributes == {"k": [1, 2]}
    assert spans[0].resource["telemetry.sdk.name"] == "opentelemetry"
    assert spans[1].start_ns <= spans[0].start_ns <= spans[0].end_ns <= spans[1].end_ns
    assert spans[1].end_ns > 0
    assert spans[1].source == f"{path}:{inner.to_json().count(chr(10)) + 2}: record 2"
    metrics = {m.name: m for m in records if isinstance(m, CapturedMetric)}
    assert (metrics["demo.loss"].kind, metrics["demo.loss"].unit, metrics["demo.loss"].points) == (
        "histogram",
        "1",
        1,
    )
    assert metrics["demo.loss"].data_points[0].sum == 1.5
    assert (metrics["demo.tokens"].kind, metrics["demo.tokens"].data_points[0].value) == ("sum", 3)
    assert read_metrics(path) == list(metrics.values())


def test_several_files_documents_and_a_byte_order_mark(tmp_path: Path) -> None:
    one = tmp_path / "one.json"
    one.write_bytes(
        b"\xef\xbb\xbf" + (_otlp(_span()) + "\n\n" + _otlp(_span(spanId="00000000000000dd"))).encode()
    )
    pretty = tmp_path / "pretty.json"  # one document over many lines, two on one line
    pretty.write_text(
        json.dumps(json.loads(_otlp(_span(spanId="00000000000000ee"))), indent=2)
        + "\n"
        + _otlp(_span(spanId="00000000000000ef"))
        + _otlp(_span(spanId="00000000000000f0")),
        encoding="utf-8",
    )
    spans = read_spans([one, pretty])
    assert [s.span_id[-2:] for s in spans] == ["aa", "dd", "ee", "ef", "f0"]
    assert [s.source.split(": ")[0] for s in spans] == [f"{one}:1", f"{one}:3", f"{pretty}:1"] + [
        f"{pretty}:{json.dumps(json.loads(_otlp(_span())), indent=2).count(chr(10)) + 2}"
    ] * 2


def test_records_stream_before_a_later_malformed_document(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(_otlp(_span()) + "\n" + "{broken\n", encoding="utf-8")
    records = iter_records(path)
    assert isinstance(next(records), CapturedSpan)
    with pytest.raises(CaptureError, match=r"c\.json:2:2: error: not JSON"):
        next(records)


def test_lines_longer_than_a_read_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture_documents, "_CHUNK", 7)
    path = tmp_path / "c.json"
    path.write_text(
        _otlp(_span(), _span(spanId="00000000000000dd")) + "\n" + _otlp(_span()), encoding="utf-8"
    )
    assert len(read_spans(path)) == 3


def test_a_document_over_the_size_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(capture_documents, "MAX_DOCUMENT_BYTES", 4096)
    path = tmp_path / "c.json"
    small = _otlp(_span())
    path.write_text(small + "\n" + _otlp(*[_span()] * 40) + "\n", encoding="utf-8")
    with pytest.raises(CaptureError, match=r"c\.json:2:1: error: a document larger than 4096 bytes"):
        read_spans(path)
    # one document over many lines: the same, located at its first line
    path.write_text(small + "\n" + json.dumps(json.loads(_otlp(*[_span()] * 40)), indent=1), encoding="utf-8")
    with pytest.raises(CaptureError, match=r"c\.json:2:1: error: a document larger"):
        read_spans(path)
    # a line with no newline at all (a binary dump, a runaway writer) is cut off at the limit
    path.write_text("x" * 10_000, encoding="utf-8")
    with pytest.raises(CaptureError, match=r"c\.json:1:1: error: a document larger"):
        read_spans(path)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_capture_path_is_exit_3(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "capture.json"
    if kind == "directory":
        path.mkdir()
    assert main(["verify", str(SPECS), str(path)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: error: cannot read: "), err
    assert "Traceback" not in err


def test_a_bad_second_capture_file_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(_otlp(_span()) + "\n", encoding="utf-8")
    bad.write_text(_otlp(_span(), _span(spanId="xyz")) + "\n", encoding="utf-8")
    assert main(["verify", str(SPECS), str(good), str(bad)]) == 3
    assert capsys.readouterr().err == (
        f'{bad}:1:1: error: record 2 (resourceSpans[0].scopeSpans[0].spans[1].spanId): "xyz" is not 16 hex digits\n'
    )
