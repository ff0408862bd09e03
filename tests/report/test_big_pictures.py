"""Pictures of big runs from aggregates: the rules of ``render_html`` (TIMELINE_PROCESSES,
STEP_POINTS, HEAT_ROWS) and ``compute.TIMELINE_BARS``, exercised with small limits on a small
capture (every figure known: 3 ranks, rank r's step 100 + 3r ms every 7th iteration)."""

from __future__ import annotations

import importlib

import pytest

from codegen.report import build
from codegen.report.render_html import page_data
from tests.report.synthetic import write_capture

compute = importlib.import_module("codegen.report.compute")
render_html = importlib.import_module("codegen.report.render_html")  # the package exports a function so named


@pytest.fixture
def capture(tmp_path):
    path = tmp_path / "capture.jsonl"
    write_capture(path, ranks=3, iterations=40, save_every=20, eval_every=20)
    return path


def test_iteration_bars_binned_beyond_the_limit(project, capture, monkeypatch):
    monkeypatch.setattr(compute, "TIMELINE_BARS", 10)
    outputs = build(project, [capture])
    report, steps = outputs.report, outputs.capture.steps
    for p in range(3):
        bars = [b for b in report.bars if b.process == p and b.row == "iteration"]
        assert [b.label for b in bars] == [f"{k}-{k + 3}" for k in range(0, 40, 4)]
        rows = {steps.number[k]: k for k in range(len(steps)) if steps.process[k] == p}
        assert bars[1].start == steps.start[rows[4]]
        assert bars[1].end == steps.start[rows[7]] + steps.duration[rows[7]]


def test_timeline_draws_the_slowest_ranks_then_the_lowest(project, capture, monkeypatch):
    monkeypatch.setattr(render_html, "TIMELINE_PROCESSES", 2)
    data = page_data(build(project, [capture]).report)
    assert [p["label"] for p in data["processes"]] == ["run 0: rank 0 (pid 1000)", "run 0: rank 2 (pid 1002)"]
    assert {bar[0] for bar in data["bars"]} == {0, 2}


def test_heat_rows_share_consecutive_ranks(project, capture, monkeypatch):
    monkeypatch.setattr(render_html, "HEAT_ROWS", 2)
    report = build(project, [capture]).report
    heat = page_data(report)["heat"]
    assert [r["label"] for r in heat["rows"]] == [
        "rank 0 (pid 1000) to rank 1 (pid 1001)",
        "rank 2 (pid 1002)",
    ]
    column = heat["columns"].index("run 0 iteration 7")
    assert heat["rows"][0]["values"][column] == pytest.approx(0.103)  # rank 1's, the slower of 0 and 1
    assert heat["rows"][1]["values"][column] == pytest.approx(0.106)


def test_step_plot_points_are_the_slowest_of_their_group(project, capture, monkeypatch):
    monkeypatch.setattr(render_html, "STEP_POINTS", 10)
    report = build(project, [capture]).report
    steps = page_data(report)["steps"]
    assert steps[0][1] == 0 and steps[0][3] is True  # the first iteration, a point of its own
    assert 10 <= len(steps) <= 12
    # every 7th iteration is the slow one (106 ms, rank 2's): each group of 4 after the first holds
    # one or none
    numbers = [s[1] for s in steps[1:]]
    assert all(n % 7 == 0 for n, s in zip(numbers, steps[1:]) if s[2] > 0.101)
    assert max(s[2] for s in steps[1:]) == pytest.approx(0.106)
