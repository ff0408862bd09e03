"""The Perfetto trace of a window: the ranks and iterations asked for, or, for a capture larger
than the bound, every rank and the first iterations that fit (``codegen/report/trace_window.py``)."""

from __future__ import annotations

import json

import pytest

from codegen.report import build
from codegen.report.trace_window import choose, parse_ranks
from tests.report.synthetic import spans_per_iteration, write_capture
from tests.support.cli import codegen
from tests.support.paths import SPECS


@pytest.fixture
def capture_file(tmp_path):
    path = tmp_path / "capture.jsonl"
    write_capture(path, ranks=3, iterations=40, save_every=10, eval_every=20)
    return path


def _complete(out):
    events = json.loads((out / "trace.perfetto.json").read_text())["traceEvents"]
    labels = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    return [e for e in events if e["ph"] == "X"], labels


def test_window_of_ranks_and_iterations(capture_file, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["report", "--specs", SPECS, capture_file, "--out", out]
    assert codegen(*argv, "--trace-ranks", "1-2", "--trace-iterations", "10-12") == 0
    assert "(trace window: iterations 10-12, ranks 1-2 (2 process(es)))" in capsys.readouterr().out
    complete, labels = _complete(out)
    ranks = {labels[e["pid"]] for e in complete}
    assert ranks == {"run 0: rank 1 (pid 1001)", "run 0: rank 2 (pid 1002)"}
    iterations = [e for e in complete if e["name"] == "megatron.train.iteration"]
    assert sorted({e["args"]["megatron.iteration"] for e in iterations}) == [10, 11, 12]
    # the spans inside those iterations are all there: per rank and iteration the same count
    inner = [e for e in complete if e["name"] == "megatron.layer.forward"]
    assert len(inner) == 2 * 3 * 16
    assert not any(e["name"] == "megatron.startup" for e in complete)  # before iteration 10


def test_whole_capture_below_the_bound(capture_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert codegen("report", "--specs", SPECS, capture_file, "--out", out) == 0
    assert "(trace window: every iteration, every rank (3 process(es)))" in capsys.readouterr().out
    complete, _ = _complete(out)
    assert len(complete) == build_spans(capture_file)


def build_spans(path) -> int:
    return sum(len(d["resourceSpans"][0]["scopeSpans"][0]["spans"]) for d in map(json.loads, path.open()))


def test_large_capture_keeps_the_first_iterations_that_fit(project, capture_file):
    outputs = build(project, [capture_file])
    limit = 3 * 10 * spans_per_iteration()  # about ten iterations of three ranks
    chosen = choose(outputs.capture, limit=limit)
    assert chosen.iterations is not None and chosen.iterations[0] == 0
    kept = outputs.spans_in(chosen.window)
    assert 0 < len(kept) <= limit
    assert {p.rank for p in kept.processes} == {0, 1, 2}
    assert min(kept.iteration[i] for i in range(len(kept)) if kept.iteration[i] >= 0) == 0


def test_rank_lists():
    assert parse_ranks("0-2,5") == (0, 1, 2, 5)
    for bad in ("a", "3-1", "-1"):
        with pytest.raises(ValueError):
            parse_ranks(bad)


def test_bad_window_is_a_usage_error(capture_file, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        codegen("report", "--specs", SPECS, capture_file, "--trace-iterations", "9-x")
    assert exit_.value.code == 2
    assert "not an iteration range (A-B): '9-x'" in capsys.readouterr().err
