"""The report on two real captures, committed: megatron's own ``pretrain()`` on CPU (one rank, all
groups), 4 iterations saving every 2 (``fresh.jsonl``), then resumed from its last checkpoint to
iteration 6 (``resume.jsonl``), as ``tests/megatron_cpu/pretrain_harness.py`` runs them. The
runtime environment checks the same against the session's own runs
(``tests/megatron_cpu/test_report_pretrain.py``); these are for the fast suite.
"""

from __future__ import annotations

import pytest

from codegen.report import build
from codegen.report.render_text import FIRST_RULE, render_text, seconds
from tests.support.otlp_json import named, read_spans
from tests.support.paths import REPORT_DATA as DATA


def _seconds(spans, name) -> float:
    return sum(s["end"] - s["start"] for s in spans if s["name"] == name) / 1e9


def test_fresh_capture(project):
    report = build(project, [DATA / "fresh.jsonl"]).report
    spans = read_spans(DATA / "fresh.jsonl")
    assert report.wall == pytest.approx((max(s["end"] for s in spans) - min(s["start"] for s in spans)) / 1e9)
    assert abs(sum(report.totals.values()) - report.wall) <= 0.01 * report.wall
    (run,) = report.runs
    assert run.saves == [2, 4] and (run.first_iteration, run.last_iteration) == (0, 3)
    assert report.steps.count == 4
    assert report.totals["evaluation"] == pytest.approx(_seconds(spans, "megatron.evaluate"))
    assert report.totals["data_loading"] == pytest.approx(_seconds(spans, "megatron.startup.dataloader"))
    saves = [c for c in report.checkpoints if c.kind == "save"]
    assert [(c.iteration, c.seconds) for c in saves] == [
        (s["attributes"]["megatron.iteration"], pytest.approx((s["end"] - s["start"]) / 1e9))
        for s in sorted(spans, key=lambda s: s["start"])
        if s["name"] == "megatron.checkpoint.exposed_save"
    ]
    # the startup phases' figures are their spans' (nothing nested inside the backdated phases)
    for phase in ("pre_startup", "megatron.startup.launch_script", "megatron.startup.imports"):
        assert report.startup_phases[phase] == pytest.approx(_seconds(spans, phase))
    assert report.totals["restart"] == report.totals["progress_lost"] == 0
    assert report.totals["unaccounted"] < 0.001 * report.wall


def test_fresh_then_resume(project):
    report = build(project, [DATA / "fresh.jsonl", DATA / "resume.jsonl"]).report
    fresh, resume = read_spans(DATA / "fresh.jsonl"), read_spans(DATA / "resume.jsonl")
    assert abs(sum(report.totals.values()) - report.wall) <= 0.01 * report.wall
    first, second = report.runs
    assert second.resumed_from == 4 and second.saves == [6] and first.redone == 0
    (save4,) = named(fresh, "megatron.checkpoint.exposed_save", iteration=4)
    fresh_end = max(s["end"] for s in fresh)
    assert 0 <= report.totals["progress_lost"] <= (fresh_end - save4["end"]) / 1e9
    assert report.totals["restart"] == pytest.approx((min(s["start"] for s in resume) - fresh_end) / 1e9)
    assert report.totals["checkpoint_load"] == pytest.approx(_seconds(resume, "megatron.checkpoint.load"))
    assert report.steps.count == 6


def test_load_row_names_the_iteration_the_run_resumed_from(project):
    """The load span of the resumed run names no iteration; its row says the one the run resumed
    from (the summary's "resumed from iteration 4"), marked as such, not "-"."""
    result = build(project, [DATA / "fresh.jsonl", DATA / "resume.jsonl"])
    (load,) = [c for c in result.report.checkpoints if c.kind == "load"]
    assert (load.run, load.iteration, load.resumed) == (1, 4, True)
    text = render_text(result.report)
    assert "run 1 load iteration 4 (the iteration run 1 resumed from)" in text
    assert "iteration not recorded" not in text


def test_first_iteration_overhead_states_its_rule_and_per_process_median(project):
    """The text gives the rule and, per process, the first step and that process's own median it is
    compared with (run 0's median step is 294.7 ms, above its 199.1 ms first step: no overhead),
    beside the step-time median over every run (191.4 ms)."""
    report = build(project, [DATA / "fresh.jsonl", DATA / "resume.jsonl"]).report
    iterations = named(read_spans(DATA / "fresh.jsonl"), "megatron.train.iteration")
    fresh = sorted(iterations, key=lambda s: s["start"])
    first_ns = fresh[0]["end"] - fresh[0]["start"]
    others = sorted(s["end"] - s["start"] for s in fresh[1:])
    own_median = others[len(others) // 2] / 1e9
    process = min(report.first_steps)
    assert report.first_steps[process] == (pytest.approx(first_ns / 1e9), pytest.approx(own_median))
    text = render_text(report)
    assert FIRST_RULE in text
    assert (
        f"run 0 {report.labels[process]}: first {seconds(first_ns / 1e9)}, its median {seconds(own_median)}, "
        "overhead 0.0 ms" in text
    )
    assert f"the others: median {seconds(report.steps.median)}" in text and report.steps.median != own_median
