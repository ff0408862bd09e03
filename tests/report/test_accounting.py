"""The accounting on hand-made captures whose figures are known exactly."""

from __future__ import annotations

import dataclasses

import pytest

from codegen.report import CaptureError, build
from codegen.report.taxonomy import CATEGORIES, Taxonomy, TaxonomyError
from tests.support.otlp_json import Spans, simple_run


def _report(project, tmp_path, *captures: Spans):
    paths = [c.write(tmp_path / f"capture-{k}.json") for k, c in enumerate(captures)]
    return build(project, paths).report


def test_taxonomy_comes_from_the_specs(taxonomy):
    assert taxonomy.iteration == "megatron.train.iteration"
    assert taxonomy.interval == "megatron.train" and taxonomy.startup == "megatron.startup"
    assert taxonomy.iteration_key == "megatron.iteration"
    assert "megatron.checkpoint.exposed_save" in taxonomy.save
    assert taxonomy.category["megatron.startup.model_init"] == "startup"
    assert taxonomy.category["megatron.checkpoint.load"] == "checkpoint_load"
    assert taxonomy.category["megatron.evaluate.step"] == "evaluation"
    # spans of groups without a rule inherit their enclosing span's category
    assert "megatron.layer.forward" not in taxonomy.category


def test_a_renamed_group_fails_loudly(project):
    groups = tuple(g for g in project.groups if g.name != "evaluate")
    with pytest.raises(TaxonomyError, match="declare no group.*evaluate"):
        Taxonomy.from_project(dataclasses.replace(project, groups=groups))


def test_one_run_every_category_exact(project, tmp_path):
    spans = Spans()
    simple_run(spans)
    report = _report(project, tmp_path, spans)
    assert report.wall == pytest.approx(11.5)
    expected = {
        "goodput": 4.0,  # iterations 1-3, and a typical step's worth of the first
        "startup": 3.0,  # pre_startup, imports, model_init
        "data_loading": 1.0,
        "first_iteration": 2.0,  # 3 s first step less the 1 s median step
        "evaluation": 0.5,
        "checkpoint_save": 1.0,
    }
    for category in CATEGORIES:
        assert report.totals[category] == pytest.approx(expected.get(category, 0.0), abs=1e-9), category
    assert sum(report.totals.values()) == pytest.approx(report.wall)
    assert report.goodput == pytest.approx(4.0 / 11.5)
    assert report.startup_phases == pytest.approx(
        {"pre_startup": 1.0, "megatron.startup.imports": 1.0, "megatron.startup.model_init": 1.0}
    )
    (run,) = report.runs
    assert run.saves == [2, 4] and (run.first_iteration, run.last_iteration) == (0, 3)
    assert report.steps.count == 4 and report.steps.first == pytest.approx(3.0)
    assert report.steps.median == pytest.approx(1.0) and report.steps.max == pytest.approx(1.0)
    assert report.phase_totals["megatron.train.iteration.forward_backward"] == pytest.approx(0.75)
    saves = [c for c in report.checkpoints if c.kind == "save"]
    assert [c.iteration for c in saves] == [2, 4]
    assert saves[0].seconds == pytest.approx(0.5) and saves[0].share == pytest.approx(0.5 / 4.75)


def test_time_no_span_covers_is_unaccounted(project, tmp_path):
    spans = Spans()
    spans.add("pre_startup", 0, 1)
    startup = spans.add("megatron.startup", 3, 4)  # a 2 s hole before it
    spans.add("megatron.startup.imports", 3, 4, startup)
    report = _report(project, tmp_path, spans)
    assert report.totals["unaccounted"] == pytest.approx(2.0)
    assert report.totals["startup"] == pytest.approx(2.0)


def test_restart_progress_lost_and_redone_iterations(project, tmp_path):
    """Run 0 saves at 2, trains iterations 2 and 3, then fails; run 1 resumes at 2."""
    first = Spans({"service.name": "test", "process.pid": 1})
    simple_run(first, iterations=4, fail_after=4)  # saves at 2 only; iterations 2, 3 then failure
    second = Spans({"service.name": "test", "process.pid": 2})
    simple_run(second, offset=20.0, iterations=2, first_iteration=2)
    report = _report(project, tmp_path, first, second)
    r0, r1 = report.runs
    assert r0.saves == [2] and r0.failed and r0.redone == 2
    assert r1.resumed_from == 2 and r1.saves == [4]
    # run 0: 2 s of iterations 2 and 3 after the save at 2 ended (8.75 s) are lost
    assert report.totals["progress_lost"] == pytest.approx(2.0)
    assert report.totals["restart"] == pytest.approx(20.0 - 10.75)
    assert sum(report.totals.values()) == pytest.approx(report.wall)
    assert report.wall == pytest.approx(20.0 + 4.0 + 3.0 + 1.0 + 0.75)


def test_several_ranks_mean_slowest_and_spread(project, tmp_path):
    fast = Spans({"service.name": "test", "process.pid": 1, "dl.rank": 0, "dl.world_size": 2})
    slow = Spans({"service.name": "test", "process.pid": 2, "dl.rank": 1, "dl.world_size": 2})
    simple_run(fast, step=1.0)
    simple_run(slow, step=1.5)
    report = _report(project, tmp_path, fast, slow)
    (run,) = report.runs
    assert len(run.processes) == 2
    assert sum(report.totals.values()) == pytest.approx(report.wall)
    # the fast rank ends first: the rest of the run is unaccounted for it, half of it for the job
    slow_end = 4 + 4.5 + 1.5 + 0.75 + 1.5 * 2 + 0.75
    fast_end = 11.5
    assert report.wall == pytest.approx(slow_end)
    assert report.totals["unaccounted"] == pytest.approx((slow_end - fast_end) / 2)
    for item in report.iterations:
        process, seconds = item.slowest
        assert report.labels[process].startswith("rank 1")
        assert item.spread == pytest.approx(seconds - item.durations[min(item.durations)], abs=1)
    assert report.iterations[1].spread == 0.5 * 1e9
    per_rank = report.per_process
    assert set(per_rank) == {0, 1}
    assert all(sum(row.values()) == pytest.approx(report.wall) for row in per_rank.values())


def test_run_id_groups_ranks_and_separates_restarts(project, tmp_path):
    """multi-rank runs export ``megatron.run_id`` on every rank: one run per id, in time order."""
    captures = []
    for run_id, offset in (("aa", 0.0), ("bb", 30.0)):
        for rank in (0, 1):
            spans = Spans({"service.name": "test", "process.pid": 100 + rank, "dl.rank": rank,
                           "dl.world_size": 2, "megatron.run_id": run_id})  # fmt: skip
            simple_run(spans, offset=offset + rank * 0.5)
            captures.append(spans)
    report = _report(project, tmp_path, *captures)
    assert [len(r.processes) for r in report.runs] == [2, 2]
    assert report.totals["restart"] == pytest.approx(30.0 - 12.0)
    assert sum(report.totals.values()) == pytest.approx(report.wall)


def test_overlapping_runs_of_different_ids_are_two_jobs(project, tmp_path):
    captures = []
    for run_id in ("aa", "bb"):
        spans = Spans({"service.name": "test", "process.pid": 7, "megatron.run_id": run_id})
        simple_run(spans)
        captures.append(spans)
    with pytest.raises(CaptureError, match="spans of two jobs mixed: runs aa and bb overlap in time"):
        _report(project, tmp_path, *captures)


def test_files_read_in_worker_processes_give_the_same_report(project, tmp_path):
    """Several files (one per rank) read by two worker processes, merged: the same figures."""
    paths = []
    for rank in (0, 1):
        spans = Spans(
            {"service.name": "test", "process.pid": 100 + rank, "dl.rank": rank, "dl.world_size": 2}
        )
        simple_run(spans, step=1.0 + 0.5 * rank)
        spans.add("my.custom.span", 5, 6)
        paths.append(spans.write(tmp_path / f"rank{rank}.json"))
    serial = build(project, paths, jobs=1)
    parallel = build(project, paths, jobs=2)
    assert parallel.text == serial.text
    assert parallel.report.totals == serial.report.totals
    assert list(parallel.capture.name) == list(serial.capture.name)
    assert parallel.capture.names == serial.capture.names
    assert parallel.report.unknown == serial.report.unknown
    assert [c.iteration for c in parallel.report.checkpoints] == [
        c.iteration for c in serial.report.checkpoints
    ]


def test_worker_processes_report_the_first_bad_file(project, tmp_path):
    good = Spans({"service.name": "a", "process.pid": 1})
    simple_run(good)
    other = Spans({"service.name": "b", "process.pid": 2})
    simple_run(other, offset=100)
    paths = [good.write(tmp_path / "a.json"), other.write(tmp_path / "b.json")]
    with pytest.raises(
        CaptureError, match="b.json:1:1: error: record 1: spans of two jobs mixed: service.name"
    ):
        build(project, paths, jobs=2)
