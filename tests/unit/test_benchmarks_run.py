"""The README's benchmark command still runs against the code the generator emits today.

The benchmark imports the generated fixture and reaches into it (the module's runtime name among
others), so a change to the generated code can break it without any other test noticing (the
runtime import's rename to ``_otel`` did). One round of the per-call rows, nothing timed here.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import run, timing

REPO = Path(__file__).resolve().parents[2]


def test_benchmark_runtime_rows_run_on_the_generated_fixture(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "benchmarks", "--quick", "--no-lens", "--no-generator", "--no-import"]
    command += ["--no-process", "--no-serving", "--table", str(tmp_path / "table.txt")]
    result = subprocess.run(
        [*command, "--rounds", "1"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "table.txt").read_text()
    assert "function span, group disabled / uninstrumented" in table
    assert "enabled span, recording / SDK start_as_current_span" in table
    # the terminal gets the goal rows, 100 columns wide, and where the rest went (the table's own
    # path aside: under pytest-xdist tmp_path alone is ~80 characters)
    table_path = str(tmp_path / "table.txt")
    assert max(len(line.replace(table_path, "")) for line in result.stdout.splitlines()) <= 100
    assert "function span, group disabled /" in " ".join(result.stdout.split())  # wherever wrapped
    assert str(tmp_path / "table.txt") in result.stdout


def _step_data(default_scale: float, spread: float) -> dict[str, object]:
    """A step worker's report: ``off`` steps of 20 ms varying by ``spread`` from round to round,
    ``default`` the same steps times ``default_scale``, the other arms like ``off``."""
    draw = random.Random(1)
    off = [0.020 * (1 + spread * draw.uniform(-1, 1)) for _ in range(60)]
    arms = {"off": off, "off2": off, "default": [t * default_scale for t in off], "all": off}
    rounds = {arm: list(values) for arm, values in arms.items()}
    medians = {arm: sorted(values)[30] for arm, values in arms.items()}
    sizes = dict(NUM_LAYERS=2, HIDDEN=64, HEADS=4, SEQ=16, VOCAB=128, MICRO_BATCH=2, NUM_MICROBATCHES=2)
    return {
        "shape": "tiny", "sizes": sizes, "rounds": 60, "torch": "-", "threads": 1,
        "median_s": medians, "cpu_s": medians, "export_cpu_s": dict.fromkeys(arms, 0.0),
        "times_s": rounds, "cpu_times_s": rounds, "sdk_span_s": 5e-5,
        "spans_per_step": {"off": 0, "off2": 0, "default": 0, "all": 18},
    }  # fmt: skip


def _default_status(data: dict[str, object]) -> str:

    (row,) = (
        r
        for r in run.step_rows(data)
        if r.label.startswith("train_step training-thread CPU, telemetry default")
    )
    assert "95% interval" in row.label
    return row.status


def test_a_step_goal_over_its_bound_is_noise_only_when_its_interval_reaches_the_bound() -> None:
    # paired by round: a steady 3% is measured exactly whatever the rounds' spread
    assert _default_status(_step_data(1.03, 0.25)) == "NOT MET"
    assert _default_status(_step_data(1.0, 0.25)) == "met"


def test_the_step_interval_is_the_spread_of_the_per_round_ratios() -> None:

    draw = random.Random(2)
    noisy = [1.02 + 0.5 * draw.uniform(-1, 1) for _ in range(60)]
    low, high = run._interval(noisy)
    assert low < 1.01 < high
    # above its goal: NOT MET, whatever the interval says (that goes beside the status)
    assert run._status_within(1.02, low, ("<=", 1.01)) == "NOT MET (within noise)"
    assert run._status_within(1.0, low, ("<=", 1.01), high) == "met (its interval reaches over)"
    steady = [1.03 + 0.001 * draw.uniform(-1, 1) for _ in range(60)]
    low, high = run._interval(steady)
    assert 1.02 < low <= high < 1.04
    assert run._status_within(1.03, low, ("<=", 1.01)) == "NOT MET"
    assert run._interval([5.0] * 10) == (5.0, 5.0)


def _process_data(export_us: float, training_us: float) -> dict[str, object]:
    """A process worker's report: 8 rounds, ``off`` steps with a spread, every arm adding
    ``training_us`` a span on the training thread and ``export_us`` on the other threads."""
    draw = random.Random(2)
    spans = 786
    off = {
        "thread_cpu_s": [0.010 * (1 + 0.2 * draw.uniform(-1, 1)) for _ in range(8)],
        "other_cpu_s": [0.0001] * 8,
        "wall_s": [1.0] * 8,
    }
    runs = {"off": off}
    for arm in ("sdk", "lean_readable", "lean"):
        runs[arm] = {
            "thread_cpu_s": [t + spans * training_us * 1e-6 for t in off["thread_cpu_s"]],
            "other_cpu_s": [o + spans * export_us * 1e-6 for o in off["other_cpu_s"]],
            "wall_s": [1.01] * 8,
        }
    return {
        "rounds": 8, "steps": 2, "step_s": 1.0, "load": "0.5 on 2 CPUs",
        "spans_per_step": {"off": 0, "sdk": spans, "lean_readable": spans, "lean": spans},
        "runs": runs,
    }  # fmt: skip


def test_process_rows_read_the_lean_goals_from_the_paired_differences() -> None:

    rows = {r.label: r for r in run.process_rows(_process_data(export_us=3.0, training_us=2.0))}
    export = rows["all, lean path: export CPU per span (the process's other threads, arm - off)"]
    assert export.value == "3.00 us" and export.goal == "<= 4 us" and export.status == "met"
    total = rows["all, lean path: all telemetry work (both) per step, % of a 1 s step"]
    assert total.value == "0.39 %" and total.status.startswith("met")  # 786 x 5 us of a 1 s step
    gil = rows[
        "all, lean path: telemetry threads' CPU per second of training (the GIL they can hold at most)"
    ]
    assert gil.value == "2.33 ms/s"  # 786 x 3 us over a 1.01 s step
    assert (
        rows["all, SDK path: export CPU per span (the process's other threads, arm - off)"].status == "info"
    )
    slow = {r.label: r for r in run.process_rows(_process_data(export_us=20.0, training_us=4.0))}
    assert (
        slow["all, lean path: export CPU per span (the process's other threads, arm - off)"].status
        == "NOT MET"
    )
    assert slow["all, lean path: all telemetry work (both) per step, % of a 1 s step"].status == "NOT MET"


def _per_call(rounds: list[float], run: str) -> dict[str, object]:
    return {
        "min_ns": min(rounds),
        "median_ns": sorted(rounds)[len(rounds) // 2],
        "rounds_ns": rounds,
        "run": run,
    }


def test_a_per_call_ratio_pairs_rounds_of_one_measurement_only() -> None:

    # the variant costs 1.4x the baseline in every round; one round was lucky for the baseline alone
    base = [30.0] * 20 + [20.0]
    guarded = [42.0] * 20 + [42.0]
    results = {"base": _per_call(base, "one"), "guarded": _per_call(guarded, "one")}
    assert run.paired_ratio(results["guarded"], results["base"]) == 1.4
    row = run.ratio_row("s", "guarded / base", results, "guarded", "base", ("<=", 1.5))
    assert (row.ratio, row.median_ratio, row.status) == ("2.10x", "1.40x", "met")
    # the same numbers from two measurements (two processes) do not pair: the minimums decide
    results["base"]["run"] = "two"
    assert run.paired_ratio(results["guarded"], results["base"]) is None
    assert run.ratio_row("s", "guarded / base", results, "guarded", "base", ("<=", 1.5)).status == "NOT MET"
    # a variant slower in every round is not met, whatever the minimums
    results = {"base": _per_call(base, "one"), "guarded": _per_call([48.0] * 20 + [30.0], "one")}
    assert run.ratio_row("s", "guarded / base", results, "guarded", "base", ("<=", 1.5)).status == "NOT MET"


def test_measure_reports_every_round_in_order() -> None:

    results = timing.measure(
        [timing.Variant("a", lambda: None), timing.Variant("b", lambda: None)], rounds=3, target_s=0.0005
    )
    assert [len(r.rounds_ns) for r in results.values()] == [3, 3]
    assert results["a"].run == results["b"].run != ""
    assert results["a"].min_ns == min(results["a"].rounds_ns)
    assert set(results["a"].as_json()) == {"min_ns", "median_ns", "rounds_ns", "run"}


def _own_status(runtime_us: float, own_us: float) -> str:

    data = _step_data(1.0, 0.25)
    off = data["cpu_times_s"]["off"]
    for arm, added_us in (("all", runtime_us), ("sdk_own", own_us)):
        data["cpu_times_s"][arm] = data["times_s"][arm] = [t + 18 * added_us * 1e-6 for t in off]
        data["median_s"][arm] = data["cpu_s"][arm] = sorted(data["cpu_times_s"][arm])[30]
        data["export_cpu_s"][arm] = 0.0
        data["spans_per_step"][arm] = 18
    (row,) = (r for r in run.step_rows(data) if "the SDK's own spans at the same sites" in r.label)
    return row.status


def test_the_sdk_path_row_reads_the_sdk_own_spans_added_the_same_way() -> None:
    # paired by round: a steady 10% over the SDK's own spans meets 1.2x, a steady 50% does not
    assert _own_status(110.0, 100.0) == "met"
    assert _own_status(150.0, 100.0) == "NOT MET"


def test_serving_rows_read_the_paired_differences_against_a_50_ms_budget() -> None:
    """The serving goal is on the median per-round added latency: at most 1% of the 50 ms request."""

    base = [0.050 + 0.001 * (i % 3) for i in range(9)]
    data = {
        "delay_ms": 50.0,
        "rounds": 9,
        "load": (1.0, 1.0, 1.0),
        "latency_s": {
            "pristine": base,
            "off": [b + 0.0001 for b in base],
            "default": [b + 0.0002 for b in base],  # +0.1 ms over off: met
            "all": [b + 0.0011 for b in base],  # +1.0 ms over off: over 0.5 ms
        },
        "micro": {
            "plain": {"min_ns": 100.0, "median_ns": 110.0, "samples": 1},
            "traced_off": {"min_ns": 130.0, "median_ns": 140.0, "samples": 1},
        },
    }
    rows = {row.label.split(" (median")[0]: row for row in run.serving_rows(data)}
    assert rows["request latency, off / pristine"].status == "info"
    assert rows["request latency, default / off"].value == "+0.100 ms"
    assert rows["request latency, default / off"].status == "met"
    assert rows["request latency, all / off"].status == "NOT MET"
    micro = rows["async span (traced coroutine), group disabled / uninstrumented coroutine"]
    assert (micro.ratio, micro.status) == ("1.30x", "met")
    # where callgrind counted the instructions, the goal reads them and the timed row is info
    data["instructions"] = {"plain": 4000.0, "traced": 6400.0}
    rows = {row.label.split(" (median")[0]: row for row in run.serving_rows(data)}
    assert rows["async span (traced coroutine), group disabled / uninstrumented coroutine"].status == "info"
    counted = rows["async span, group disabled / uninstrumented coroutine (instructions per call)"]
    assert (counted.value, counted.ratio, counted.status) == ("6,400", "1.600x", "NOT MET")


def test_the_dependency_mode_goals_read_instructions_where_callgrind_counted_them() -> None:
    from benchmarks import dependency_bench

    timed = {"min_ns": 31.0, "median_ns": 32.0, "samples": 1}
    results = {"python": "3.11.7", "shim.base": {"min_ns": 20.0, "median_ns": 20.0, "samples": 1},
               "package.base": {"min_ns": 20.0, "median_ns": 20.0, "samples": 1},
               "shim.function.group_off": timed, "package.function.group_off": timed,
               "shim.statement.group_off": timed}  # fmt: skip

    def goals(results: dict) -> dict[str, tuple[str, str]]:
        rows = dependency_bench.rows(results, run.ratio_row, run.instruction_row)
        return {r.label: (r.goal, r.status) for r in rows if r.goal}

    # timed alone (no valgrind): the timed rows carry the goals (1.55x: over)
    timed_goals = goals(results)
    assert timed_goals == {
        "function span, package absent (shim's no-ops) / uninstrumented": ("<= 1.5x", "NOT MET"),
        "function span, package installed, group disabled / uninstrumented": ("<= 1.5x", "NOT MET"),
    }
    # counted: the instruction rows carry them, the timed rows are information
    results["instructions"] = {"shim.base": 100.0, "shim.function.group_off": 120.0,
                               "shim.statement.group_off": 121.0, "package.base": 100.0,
                               "package.function.group_off": 151.0, "package.statement.group_off": 152.0}  # fmt: skip
    assert goals(results) == {
        "function span, package absent (shim's no-ops) / uninstrumented (instructions per call)": ("<= 1.5x", "met"),
        "function span, package installed, group disabled / uninstrumented (instructions per call)": (
            "<= 1.5x", "NOT MET"),
    }  # fmt: skip
    # a failed count leaves the goals with the timed rows
    results["instructions"] = {"error": "valgrind exited 1"}
    assert goals(results) == timed_goals


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="no valgrind on PATH: the counts need callgrind")
def test_the_dependency_mode_instructions_are_counted_for_both_arms(tmp_path: Path) -> None:
    from benchmarks import dependency_bench

    tree, site = dependency_bench.build(tmp_path)
    counts = dependency_bench.count_instructions(tree, site, calls=2000)
    for arm in ("shim", "package"):  # the package absent, and installed with the group disabled
        base, span = counts[f"{arm}.base"], counts[f"{arm}.function.group_off"]
        assert 100 < base < span < 1.5 * base, counts  # a flag read and a try/finally, no call


def test_a_value_over_its_goal_never_reads_met() -> None:

    for value, low, high in ((0.61, 0.40, 0.90), (0.61, 0.605, 0.62), (0.9, 0.1, 2.0)):
        assert run._status_within(value, low, ("<=", 0.6), high).startswith("NOT MET")
    assert run._status_within(0.5, 0.4, ("<=", 0.6), 0.59) == "met"


def test_process_rows_carry_the_half_cost_goals() -> None:

    rows = {r.label: r for r in run.process_rows(_process_data(export_us=5.0, training_us=4.0))}
    training = rows["all, lean path: training-thread CPU per span (arm - off)"]
    assert training.goal == "<= 3 us" and training.status.startswith("NOT MET")
    export = rows["all, lean path: export CPU per span (the process's other threads, arm - off)"]
    assert export.goal == "<= 4 us" and export.status == "NOT MET"
    share = rows["all, lean path: all telemetry work (both) per step, % of a 1 s step"]
    assert share.goal == "<= 0.6 %" and share.status.startswith("NOT MET")  # 0.71 %
    upper = rows["all, lean path: the same, the upper end of its 95% interval"]
    assert upper.goal == "<= 0.8 %"
    cheap = {r.label: r for r in run.process_rows(_process_data(export_us=2.0, training_us=1.0))}
    assert all(r.status.startswith("met") for r in cheap.values() if r.goal), [
        (r.label, r.status) for r in cheap.values() if r.goal and not r.status.startswith("met")
    ]


def test_the_summary_fits_100_columns_and_lists_each_goal_row() -> None:

    rows = run.process_rows(_process_data(export_us=5.0, training_us=4.0))
    summary = run.summary_text(rows)
    assert max(len(line) for line in summary.splitlines()) <= 100
    goal_rows = [r for r in rows if r.goal]
    assert len(goal_rows) >= 5
    for row in goal_rows:  # its status, value and goal on the line that starts it
        assert any(
            line.startswith(row.status) and row.goal in line and row.value in line
            for line in summary.splitlines()
        ), row.label
    assert sum("info" in line for line in summary.splitlines()) == 0  # info rows only in the file
    assert all(r.label in run.table_text(rows) for r in rows)


def test_a_status_longer_than_its_column_keeps_the_summary_in_100_columns() -> None:
    # "met (its interval reaches over)" is 31 characters: the step rows printed 105 columns
    long = "met (its interval reaches over)"
    rows = [
        run.Row("per training step", "train_step wall, telemetry default / off, 95% interval [0.95, 1.02]",
                "1.0 s", "1.0 s", "0.98x", "0.98x", "<= 1.01x", long),
        run.Row("per call, empty function", "function span, group disabled / uninstrumented",
                "50 ns", "50 ns", "1.00x", "1.00x", "<= 1.5x", "met"),
    ]  # fmt: skip
    summary = run.summary_text(rows)
    assert max(len(line) for line in summary.splitlines()) <= 100, summary
    for row in rows:  # its status, value and goal still on the line that starts it
        assert any(
            line.startswith(row.status) and row.goal in line and row.ratio in line
            for line in summary.splitlines()
        ), summary
    words = " ".join(line.strip() for line in summary.splitlines())
    assert "train_step wall, telemetry default / off, 95% interval [0.95, 1.02]" in words


def test_the_cache_profile_worker_never_exports_while_it_is_counted() -> None:
    """cachegrind counts every thread of the worker: an export thread woken by its schedule
    delay (5 s by default) in one run and not in its baseline is thousands of instructions no
    span costs (under load, where valgrind's runs last longer, lean read -286 a span)."""
    from benchmarks.cache_profile import EVICT, WORKER

    probe = WORKER.format(repo=str(REPO), lean=True, on=True, rounds=1, **EVICT["call"]).replace(
        "os._exit(0)",
        "(recorder,) = [r for r in otel._state.PROCESS.run.processors if hasattr(r, 'delay')]\n"
        "print(recorder.delay, flush=True)\nos._exit(0)",  # os._exit flushes nothing
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    delay_s = float(result.stdout.split()[-1])
    assert delay_s >= 3600, f"the export thread wakes every {delay_s} s while cachegrind counts"


def test_the_short_wait_row_reads_the_lean_training_thread_paired_with_off() -> None:
    data = _process_data(export_us=3.0, training_us=2.0)
    data["runs"] = {arm: data["runs"][arm] for arm in ("off", "lean")}
    data.update(step_s=0.05, pause_s=0.05 / 512)
    (row,) = run.warm_rows(data)
    assert row.label.startswith("all, lean path: training-thread CPU per span, 98 us waits")
    assert row.value == "2.00 us" and row.status == "info" and not row.goal
    low, high = (float(v) for v in row.ratio.strip("[]").split(","))
    assert low <= 2.0 <= high


def test_a_run_that_measured_nothing_says_why_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every part skipped (a bare environment: the generator cannot build the fixture, no SDK, no
    torch) used to end in a traceback from the table's widths."""

    def skipped(args: object, raw: object, rows: object, notes: list[str]) -> None:
        notes.append("serving rows skipped: torch is not installed")

    monkeypatch.setattr(run, "_serving", skipped)
    status = run.main(["--serving-only", "--table", str(tmp_path / "table.txt")])
    err = capsys.readouterr().err
    assert status == 1
    assert "nothing was measured" in err and "serving rows skipped: torch is not installed" in err
    assert not (tmp_path / "table.txt").exists()
