"""Bad input: one clear message naming the place, exit 3, nothing written, no traceback."""

from __future__ import annotations

import json

import pytest

from codegen.cli import EXIT_SOURCE, main
from tests.support.otlp_json import Spans, simple_run
from tests.support.paths import SPECS


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["report", "--specs", str(SPECS), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _good(tmp_path, name: str = "good.json", **resource) -> Spans:
    spans = Spans({"service.name": "test", "process.pid": 1, **resource})
    simple_run(spans)
    spans.write(tmp_path / name)
    return spans


def _refused(capsys, tmp_path, *paths, match: str) -> str:
    out_dir = tmp_path / "out"
    code, out, err = _run(capsys, *map(str, paths), "--out", str(out_dir))
    assert code == EXIT_SOURCE, (out, err)
    assert "Traceback" not in err and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert match in err, err
    assert not out_dir.exists()  # nothing half-written
    return err


def test_truncated_json(capsys, tmp_path):
    _good(tmp_path)
    text = (tmp_path / "good.json").read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    err = _refused(capsys, tmp_path, tmp_path / "cut.json", match="error: not JSON: Unterminated string")
    assert err.startswith(f"{tmp_path / 'cut.json'}:1:")


def test_invalid_json_names_line_and_column(capsys, tmp_path):
    _good(tmp_path)
    path = tmp_path / "bad.json"
    path.write_text((tmp_path / "good.json").read_text() + '{"resourceSpans": [}\n')
    err = _refused(capsys, tmp_path, path, match="not JSON")
    assert err.startswith(f"{path}:2:")


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        ({"job_uuid": "job-a"}, {"job_uuid": "job-b"}, "spans of two jobs mixed: job_uuid"),
        # two one-rank jobs that ran side by side
        ({"dl.world_size": 1, "dl.rank": 0}, {"dl.world_size": 1, "dl.rank": 1}, "dl.world_size is 1"),
        # two CPU runs of the harness side by side: no rank, no run id, at the same time
        ({}, {}, "neither a rank (dl.rank) nor a run id"),
        ({"dl.rank": 0}, {"dl.rank": 0}, "two processes of rank 0"),
    ],
    ids=["job_uuid", "overlapping_single_rank_runs", "overlapping_processes_without_rank", "same_rank_twice"],
)
def test_two_jobs_mixed(capsys, tmp_path, a, b, match):
    _good(tmp_path, "a.json", **a)
    _good(tmp_path, "b.json", **b, **{"process.pid": 2})
    _refused(capsys, tmp_path, tmp_path / "a.json", tmp_path / "b.json", match=match)


def _negative_duration(spans: list[dict]) -> None:
    spans[3]["endTimeUnixNano"] = str(int(spans[3]["startTimeUnixNano"]) - 5_000_000)


@pytest.mark.parametrize(
    ("mutate", "match", "place"),
    [
        (_negative_duration, "span 'megatron.startup.model_init' ends before it starts", "record 4 "),
        (
            lambda spans: spans[2].pop("endTimeUnixNano"),
            "span 'megatron.startup.imports' has a start time and no end time",
            "record 3 (resourceSpans[0].scopeSpans[0].spans[2].endTimeUnixNano): ",
        ),
    ],
    ids=["negative_duration", "missing_end"],
)
def test_span_times_that_cannot_be(capsys, tmp_path, mutate, match: str, place: str):
    spans = _good(tmp_path)
    mutate(spans.spans)
    spans.write(tmp_path / "bad.json")
    err = _refused(capsys, tmp_path, tmp_path / "bad.json", match=match)
    assert err.startswith(f"{tmp_path / 'bad.json'}:1:1: error: {place}"), err


def test_not_a_capture_and_missing_file(capsys, tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    _refused(capsys, tmp_path, tmp_path / "x.json", match="neither OTLP JSON")
    _refused(capsys, tmp_path, tmp_path / "nope.json", match="cannot read")


def test_empty_capture(capsys, tmp_path):
    """The error names the file that held no spans (it said "the capture holds no spans")."""
    (tmp_path / "empty.json").write_text("")
    err = _refused(capsys, tmp_path, tmp_path / "empty.json", match="holds no spans")
    assert err.strip() == f"{tmp_path / 'empty.json'}: error: the capture holds no spans", err
    (tmp_path / "also.json").write_text("")
    err = _refused(capsys, tmp_path, tmp_path / "empty.json", tmp_path / "also.json", match="hold no spans")
    assert (
        err.strip()
        == f"error: the captures hold no spans: {tmp_path / 'empty.json'}, {tmp_path / 'also.json'}"
    )


def test_unknown_names_warn_and_still_report(capsys, tmp_path):
    spans = Spans()
    simple_run(spans)
    spans.add("my.custom.span", 5, 6)
    spans.add("my.custom.span", 6, 6.5)
    path = spans.write(tmp_path / "custom.json")
    code, out, err = _run(capsys, str(path))
    assert code == 0
    assert f"{path}:1:1: warning: record 27: span 'my.custom.span' (2x) is not in the specs' taxonomy" in err
    assert "my.custom.span: 2" in out
    assert "Goodput:" in out


def test_console_exporter_stream(capsys, tmp_path):
    """The SDK console exporter's output: indented span objects one after the other."""
    spans = []
    for name, start, end, parent in (
        ("megatron.startup", "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:02.000000Z", None),
        ("megatron.train", "2026-01-01T00:00:02.000000Z", "2026-01-01T00:00:05.500000Z", None),
    ):
        spans.append(
            {
                "name": name,
                "context": {"trace_id": "0x" + "1" * 32, "span_id": "0x" + f"{len(spans) + 1:016x}"},
                "kind": "SpanKind.INTERNAL",
                "parent_id": parent,
                "start_time": start,
                "end_time": end,
                "status": {"status_code": "UNSET"},
                "attributes": {"megatron.span_group": "job"},
                "links": [],
                "resource": {"attributes": {"service.name": "megatron-lm"}},
            }
        )
    path = tmp_path / "console.txt"
    path.write_text("".join(json.dumps(s, indent=4) + "\n" for s in spans))
    code, out, err = _run(capsys, str(path))
    assert code == 0, err
    assert "Job: 5.500 s wall time" in out
    assert "Goodput: 63.6%" in out  # 3.5 s of 5.5 s
