"""``codegen report`` on the captures of megatron's own ``pretrain()`` on CPU (the session's runs).

The report's figures are checked against what each run did (its worker's results, the
harness's configuration) and against the spans themselves, read by the harness's own reader:
the number of iterations and saves, the resumed run's lost progress, the categories summing to
the wall time. The runs are ``pretrain_harness.CONFIGS``, made once per session by the
``pretrain_runs`` fixture (conftest.py); nothing here runs pretrain again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is needed to run megatron.training on CPU")

from codegen.cli import main
from codegen.diagnostics import Diagnostics
from codegen.report import CaptureError, build
from codegen.spec.load import load_project
from tests.megatron_cpu.pretrain_harness import (
    KILL_AT,
    RESUME_ITERS,
    SAVE_INTERVAL,
    SIGTERM_AT,
    TRAIN_ITERS,
)
from tests.support.otlp_json import named

SPECS = Path(__file__).resolve().parents[2] / "specs"


@pytest.fixture(scope="module")
def project():
    return load_project(SPECS, Diagnostics())


def _report(project, *runs):
    for run in runs:
        run.check()
    return build(project, [run.capture for run in runs]).report


def _sums_to_wall(report) -> None:
    total = sum(report.totals.values())
    assert abs(total - report.wall) <= 0.01 * report.wall, (total, report.wall)
    for row in report.per_process.values():
        assert all(value >= 0 for value in row.values()), row


def _named(spans, name):
    return sorted((s for s in spans if s["name"] == name), key=lambda s: s["start"])


def test_fresh_run_figures(pretrain_runs, project):
    run = pretrain_runs["fresh"]
    report = _report(project, run)
    spans = run.spans()
    _sums_to_wall(report)
    # wall time: first span start to last span end
    assert report.wall == pytest.approx((max(s["end"] for s in spans) - min(s["start"] for s in spans)) / 1e9)
    (summary,) = report.runs
    assert summary.saves == list(range(SAVE_INTERVAL, TRAIN_ITERS + 1, SAVE_INTERVAL))
    assert (summary.first_iteration, summary.last_iteration) == (0, TRAIN_ITERS - 1)
    assert report.steps.count == TRAIN_ITERS == len(run.results[0]["iterations"])
    # every badput kind this run has, and the time of each matches its spans
    saves = _named(spans, "megatron.checkpoint.exposed_save")
    assert [c.iteration for c in report.checkpoints if c.kind == "save"] == [
        s["attributes"]["megatron.iteration"] for s in saves
    ]
    for row, span in zip([c for c in report.checkpoints if c.kind == "save"], saves):
        assert row.seconds == pytest.approx((span["end"] - span["start"]) / 1e9)
    assert report.totals["checkpoint_save"] >= sum((s["end"] - s["start"]) / 1e9 for s in saves) - 1e-9
    evaluations = _named(spans, "megatron.evaluate")
    assert report.totals["evaluation"] == pytest.approx(
        sum((s["end"] - s["start"]) / 1e9 for s in evaluations)
    )
    (dataloader,) = _named(spans, "megatron.startup.dataloader")
    assert report.totals["data_loading"] == pytest.approx((dataloader["end"] - dataloader["start"]) / 1e9)
    (pre,) = _named(spans, "pre_startup")
    assert report.startup_phases["pre_startup"] == pytest.approx((pre["end"] - pre["start"]) / 1e9)
    assert report.totals["progress_lost"] == report.totals["restart"] == 0
    assert 0 < report.goodput < 1
    # step times are the iteration spans'
    iterations = _named(spans, "megatron.train.iteration")
    durations = sorted((s["end"] - s["start"]) / 1e9 for s in iterations[1:])
    assert report.steps.max == pytest.approx(durations[-1])
    assert report.steps.first == pytest.approx((iterations[0]["end"] - iterations[0]["start"]) / 1e9)


def test_resumed_run_lost_progress_and_restart(pretrain_runs, project):
    """fresh then resume, one job: the resumed run starts from fresh's last checkpoint (iteration
    4), so fresh's goodput after that save ended is lost (nothing trained after it: 0 iterations
    redone), and the time between the runs is the restart."""
    fresh, resume = pretrain_runs["fresh"], pretrain_runs["resume"]
    report = _report(project, fresh, resume)
    _sums_to_wall(report)
    first, second = report.runs
    assert second.resumed_from == TRAIN_ITERS
    assert (second.first_iteration, second.last_iteration) == (TRAIN_ITERS, RESUME_ITERS - 1)
    assert second.saves == [RESUME_ITERS]
    assert first.redone == 0
    fresh_spans, resume_spans = fresh.spans(), resume.spans()
    (last_save,) = named(fresh_spans, "megatron.checkpoint.exposed_save", iteration=TRAIN_ITERS)
    fresh_end = max(s["end"] for s in fresh_spans)
    # lost: goodput after the save, at most the time left in the run after it
    assert 0 <= report.totals["progress_lost"] <= (fresh_end - last_save["end"]) / 1e9
    resume_start = min(s["start"] for s in resume_spans)
    assert report.totals["restart"] == pytest.approx((resume_start - fresh_end) / 1e9)
    (load,) = [c for c in report.checkpoints if c.kind == "load"]
    (load_span,) = _named(resume_spans, "megatron.checkpoint.load")
    assert load.run == 1 and load.seconds == pytest.approx((load_span["end"] - load_span["start"]) / 1e9)
    assert report.totals["checkpoint_load"] >= load.seconds - 1e-9


def test_killed_run_then_a_run_from_scratch_loses_everything_it_trained(pretrain_runs, project):
    """killed (no checkpoint, SIGTERM in its second iteration), then sigterm's run, which starts at
    iteration 0: all of killed's goodput is progress lost, its iterations redone."""
    killed, later = pretrain_runs["killed"], pretrain_runs["sigterm"]
    alone = _report(project, killed)
    (summary,) = alone.runs
    assert summary.failed and summary.saves == []
    _sums_to_wall(alone)
    assert alone.totals["progress_lost"] == 0  # not lost until a later run says where it resumed
    report = _report(project, killed, later)
    _sums_to_wall(report)
    first, second = report.runs
    assert second.resumed_from == 0
    iterations = _named(killed.spans(), "megatron.train.iteration")
    assert first.redone == len(iterations) == KILL_AT + 1  # the interrupted one included
    # what killed trained is lost (a typical step's worth of its first iteration stays goodput)
    assert 0 < report.totals["progress_lost"] <= alone.totals["goodput"] + 1e-9


def test_runs_that_overlapped_are_refused_as_two_jobs(pretrain_runs, project):
    """resume and killed ran side by side (one harness batch): one rank each, at the same time."""
    with pytest.raises(CaptureError, match="spans of two jobs mixed"):
        build(project, [pretrain_runs["resume"].capture, pretrain_runs["killed"].capture])


def test_sigterm_run_saves_on_exit(pretrain_runs, project):
    run = pretrain_runs["sigterm"]
    report = _report(project, run)
    _sums_to_wall(report)
    (summary,) = report.runs
    assert summary.saves == [SIGTERM_AT + 1]
    assert report.steps.count == SIGTERM_AT + 1 == len(run.results[0]["iterations"])


@pytest.mark.parametrize("name", ["pp", "pp_first", "dp"])
def test_parallel_runs(pretrain_runs, project, name):
    run = pretrain_runs[name]
    report = _report(project, run)
    _sums_to_wall(report)
    assert report.steps.count == 2 == len(run.results[-1]["iterations"])
    assert [r.saves for r in report.runs] == [[]]


def test_default_preset_has_no_iterations_but_goodput(pretrain_runs, project):
    """The production preset records no step spans: goodput is the intervals less their badput."""
    run = pretrain_runs["default"]
    report = _report(project, run)
    _sums_to_wall(report)
    assert report.steps.count == 0 and report.goodput > 0
    assert [r.saves for r in report.runs] == [[2, 4]]


def test_cli_writes_the_outputs(pretrain_runs, tmp_path, capsys):
    fresh, resume = pretrain_runs["fresh"], pretrain_runs["resume"]
    out = tmp_path / "report"
    assert main(["report", str(fresh.capture), str(resume.capture), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Where the time went" in printed and "resumed from iteration 4" in printed
    trace = json.loads((out / "trace.perfetto.json").read_text())
    assert len([e for e in trace["traceEvents"] if e["ph"] == "X"]) == len(fresh.spans()) + len(
        resume.spans()
    )
    # the intervals' links (each to the previous interval, the first to startup) are flows
    links = sum(len(s["links"]) for s in fresh.spans() + resume.spans())
    assert len([e for e in trace["traceEvents"] if e["ph"] == "f"]) == links > 0
    assert '<svg id="timeline"' in (out / "report.html").read_text()


def test_pp_and_dp_captures_together_are_runs_of_one_job(pretrain_runs, project):
    """Several files given together: without a job_uuid (no SLURM here) nothing tells the runs
    apart from restarts of one job, so they are three runs, each of its export rank."""
    report = _report(project, pretrain_runs["pp"], pretrain_runs["pp_first"], pretrain_runs["dp"])
    assert len(report.runs) == 3 and len(report.labels) == 3
    _sums_to_wall(report)
