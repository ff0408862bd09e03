"""Megatron-LM main's own ``pretrain()`` on CPU (issue 25, items 4 and 5).

Item 4, trace for trace: the with-#6438 snapshot (upstream's hand-written telemetry, recording
through nemo-lens) and the same snapshot in replace mode (stripped, then the specs), same flags,
``--otel-span-groups all``; ``docs/reference/main-comparison.md`` lists every difference with its reason
(``main_comparison.py``), and no hand-written span is missing from the generated trace.

Item 5, the follow-up issue's lifecycle tests, against the replaced main tree: the startup
span opens and closes once; intervals re-root at save_interval boundaries; exit hooks installed
exactly once across repeated ``pretrain()`` calls in one process (and the second run exports
again); spans closed on the exception and SIGTERM paths.

Python 3.11 runs main's code with the worker's shims (``py311_shims.py``: ``typing.override``,
and nemo-lens's one ``type`` alias statement); nothing in either tree is changed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

for _module in ("torch", "triton", "numpy"):
    pytest.importorskip(_module, reason=f"{_module} is needed to run megatron")

from codegen.diagnostics import Diagnostics
from codegen.spec.load import load_project
from tests.megatron_cpu import main_comparison as comparison
from tests.megatron_cpu.main_tree import (
    KILL_AT,
    MAIN_ARGV,
    RAISE_AT,
    SAVE_INTERVAL,
    TRAIN_ITERS,
    main_configs,
)
from tests.megatron_cpu.pretrain_harness import Run, finish, start
from tests.support.otlp_json import named
from tests.support.ports import free_port
from tests.support.upstream_main import snapshot

REPO = Path(__file__).resolve().parents[2]
BATCHES = (("hand", "generated"), ("raised", "killed"), ("repeated",))


@pytest.fixture(scope="session")
def main_runs(main_root, main_helpers, main_shims, nemo_lens_site, tmp_path_factory) -> dict[str, Run]:
    work = tmp_path_factory.mktemp("main-pretrain")
    configs = main_configs(main_root, snapshot("with"), nemo_lens_site, main_shims)
    roots = {"fork": main_root}
    runs: dict[str, Run] = {}
    for batch in BATCHES:
        started = [start(name, configs[name], roots, main_helpers, work, free_port()) for name in batch]
        for run, procs in started:
            runs[run.name] = finish(run, procs)
    return runs


def _run(runs: dict[str, Run], name: str) -> Run:
    run = runs[name]
    run.check()
    return run


def _groups_ours() -> dict[str, str]:
    project = load_project(REPO / "specs", Diagnostics())
    groups = {s.name: s.group for s in project.spans}
    groups.update({life.name: life.group for life in project.lifecycle})
    return groups


# -- item 4: trace for trace ----------------------------------------------------------------------


def test_both_trees_train_alike(main_runs):
    hand, generated = _run(main_runs, "hand"), _run(main_runs, "generated")
    for run in (hand, generated):
        (result,) = run.results
        assert result["finished"] is True and result["open_spans"] == []
        assert [i["iteration"] for i in result["iterations"]] == list(range(1, TRAIN_ITERS + 1))
    assert hand.results[0]["megatron_file"].startswith(str(snapshot("with")))
    losses = [[i["lm_loss_hex"] for i in run.results[0]["iterations"]] for run in (hand, generated)]
    assert losses[0] == losses[1]  # the same training, bit for bit


def test_no_hand_written_span_is_missing_and_every_difference_has_a_reason(main_runs):
    hand, generated = _run(main_runs, "hand").spans(), _run(main_runs, "generated").spans()
    assert len(hand) > 100  # nemo-lens recorded: the hand-written code ran for real
    rows = comparison.compare(
        hand, generated, comparison.hand_written_groups(snapshot("with")), _groups_ours(), TRAIN_ITERS
    )
    assert [r for r in rows if r[1] == "missing"] == []
    assert [r for r in rows if comparison.reason(r[0], r[1]) is None] == []
    used = {(r[0], r[1]) for r in rows}
    assert [key for key in comparison.REASONS if key not in used] == [], "a reason for no difference"


def test_the_comparison_page_is_current(main_runs):
    hand, generated = _run(main_runs, "hand"), _run(main_runs, "generated")
    text = comparison.render(
        hand.spans(),
        generated.spans(),
        comparison.hand_written_groups(snapshot("with")),
        _groups_ours(),
        TRAIN_ITERS,
        ["pretrain_gpt.py", *MAIN_ARGV, "--otel-enabled", "--otel-span-groups", "all"],
    )
    if os.environ.get("CODEGEN_REGENERATE"):
        comparison.PAGE.write_text(text)
    assert comparison.PAGE.read_text() == text, "stale: CODEGEN_REGENERATE=1 tox -e runtime -- -k main"


# -- item 5: the lifecycle, on the instrumented main tree ---------------------------------------


def test_startup_span_opens_and_closes_once(main_runs):
    spans = _run(main_runs, "generated").spans()
    (startup,) = named(spans, "megatron.startup")
    assert startup["parent_id"] is None and startup["status"] != 2
    intervals = sorted(named(spans, "megatron.train"), key=lambda s: s["start"])
    assert startup["end"] <= intervals[0]["start"]  # closed before the training loop
    for name in ("megatron.startup.model_init", "megatron.startup.dataloader"):
        (span,) = named(spans, name)
        assert span["parent_id"] == startup["span_id"]


def test_intervals_reroot_at_save_interval_boundaries(main_runs):
    spans = _run(main_runs, "generated").spans()
    intervals = sorted(named(spans, "megatron.train"), key=lambda s: s["start"])
    assert [i["attributes"]["megatron.iteration"] for i in intervals] == [0, SAVE_INTERVAL]
    (startup,) = named(spans, "megatron.startup")
    previous = startup
    for interval in intervals:
        assert interval["parent_id"] is None and interval["trace_id"] != previous["trace_id"]
        assert interval["links"] == [previous["span_id"]]
        previous = interval
    by_start = {i["attributes"]["megatron.iteration"]: i for i in intervals}
    for span in named(spans, "megatron.train.iteration"):
        number = span["attributes"]["megatron.iteration"]
        assert span["parent_id"] == by_start[number - number % SAVE_INTERVAL]["span_id"], number


def test_exit_hooks_installed_once_across_repeated_pretrain_calls(main_runs):
    run = _run(main_runs, "repeated")
    (result,) = run.results
    assert result["finished"] is True
    separator = [i["iteration"] for i in result["iterations"]].index(-1)
    assert separator == TRAIN_ITERS  # the first run trained, then the second
    assert result["exit_hooks"] == {"atexit": 1, "sigterm": 0}  # no flush timeout: no handler
    spans = run.spans()
    startups = named(spans, "megatron.startup")
    assert len(startups) == 2  # the second run in the process exports again
    assert len(named(spans, "megatron.train")) == 2 * (TRAIN_ITERS // SAVE_INTERVAL)
    assert result["open_spans"] == []


def test_spans_closed_on_the_exception_path(main_runs):
    run = _run(main_runs, "raised")
    (result,) = run.results
    assert result["finished"] is False and result["open_spans"] == []
    spans = run.spans()
    (interval,) = named(spans, "megatron.train")
    assert interval["status"] == 2  # ERROR: the exception escaped train()
    failed = named(spans, "megatron.train.iteration", iteration=RAISE_AT)
    assert len(failed) == 1 and failed[0]["status"] == 2
    (startup,) = named(spans, "megatron.startup")
    assert startup["status"] != 2  # it had closed before the loop


def test_spans_closed_on_the_sigterm_path(main_runs):
    run = _run(main_runs, "killed")
    spans = run.spans()
    (interval,) = named(spans, "megatron.train")
    assert interval["status"] == 2
    iterations = named(spans, "megatron.train.iteration")
    done = [s["attributes"]["megatron.iteration"] for s in iterations if s["status"] != 2]
    assert done == list(range(KILL_AT))
    interrupted = named(iterations, "megatron.train.iteration", iteration=KILL_AT)
    assert len(interrupted) == 1 and interrupted[0]["status"] == 2
