"""Compute: the accounting of a parsed capture (``parse.Capture``) into plain figures.

Every instant of a process's run falls in one category: that of the innermost span covering it
that sets one (``taxonomy.Taxonomy.category``; spans of other groups, e.g. forward-backward or the
layers, count in their enclosing span's category). Time no span covers is unaccounted. The job's
figure for a category is, per run, the mean over its processes (each measured over the whole run:
a process that starts late or ends early has the difference unaccounted), summed over the runs,
plus the gaps between runs (restart). So the categories add up to the wall time exactly. See the
generated docs page "How the report counts" for each definition.
"""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import median

from codegen.report.parse import Capture
from codegen.report.taxonomy import (
    CATEGORIES,
    FIRST_ITERATION,
    GOODPUT,
    PROGRESS_LOST,
    RESTART,
    STARTUP,
    UNACCOUNTED,
    Taxonomy,
)

TIMELINE_BARS = 400  # iteration bars per process at most: beyond, one bar per run of consecutive
# iterations (the first's start to the last's end, labelled A-B), as many as fit


@dataclass(frozen=True)
class Bar:
    """One span drawn on the job timeline."""

    process: int
    row: str  # "startup", "interval", "iteration", "checkpoint", "evaluation", ...
    name: str
    start: int
    end: int
    label: str = ""
    error: bool = False


@dataclass(slots=True)
class Iteration:
    run: int
    number: int
    durations: dict[int, int]  # process -> step time (ns)
    phases: dict[str, int] = field(default_factory=dict)  # phase span name -> ns (slowest rank's)
    first: bool = False  # the first iteration a process ran in this run

    @property
    def slowest(self) -> tuple[int, int]:
        process = max(self.durations, key=lambda p: self.durations[p])
        return process, self.durations[process]

    @property
    def spread(self) -> int:
        return max(self.durations.values()) - min(self.durations.values())


@dataclass(frozen=True)
class Checkpoint:
    kind: str  # "save" or "load"
    run: int
    iteration: int  # -1 when the span does not say
    seconds: float  # the slowest process's
    interval_seconds: float  # the interval it closes (saves), the run's length (loads)
    # a load whose span names no iteration: the iteration its run resumed from (the first
    # interval's), which is the checkpoint's
    resumed: bool = False

    @property
    def share(self) -> float:
        return self.seconds / self.interval_seconds if self.interval_seconds > 0 else 0.0


@dataclass(frozen=True)
class StepStats:
    count: int
    first: float | None  # seconds
    median: float | None
    p90: float | None
    max: float | None


@dataclass
class RunSummary:
    index: int
    start: int
    end: int
    processes: list[int]
    first_iteration: int | None
    last_iteration: int | None
    saves: list[int]
    failed: bool
    resumed_from: int | None = None  # the iteration it resumed from (a later run)
    redone: int = 0  # iterations of this run past the checkpoint the next run resumed from


@dataclass
class Report:
    start: int
    end: int
    totals: dict[str, float]  # category -> seconds (job: mean over a run's processes)
    startup_phases: dict[str, float]  # startup phase span -> seconds
    per_process: dict[int, dict[str, float]]  # process -> category -> seconds (over its run)
    labels: dict[int, str]  # process -> label
    runs: list[RunSummary]
    iterations: list[Iteration]
    steps: StepStats
    phase_totals: dict[str, float]  # step phase -> median seconds per iteration
    # process -> (its first step, the median of its other steps or None), seconds: the
    # first-iteration overhead is the first beyond that process's own median
    first_steps: dict[int, tuple[float, float | None]]
    checkpoints: list[Checkpoint]
    bars: list[Bar]
    unknown: dict[str, tuple[int, str]]
    spans: int

    @property
    def wall(self) -> float:
        return (self.end - self.start) / 1e9

    @property
    def goodput(self) -> float:
        return self.totals[GOODPUT] / self.wall if self.wall > 0 else 0.0


def _partition(spans: Sequence[tuple[int, int, str]], lo: int, hi: int, totals: dict[str, int]) -> None:
    """Add to ``totals`` the time of [lo, hi) by the innermost (latest started) covering span's
    bucket; time no span covers is unaccounted. ``spans`` are sorted by (start, -end)."""
    stack: list[tuple[int, str]] = []  # (end, bucket)
    t = lo

    def advance(to: int) -> None:
        nonlocal t
        while t < to:
            while stack and stack[-1][0] <= t:
                stack.pop()
            if not stack:
                totals[UNACCOUNTED] += to - t
                t = to
                return
            until = min(to, stack[-1][0])
            totals[stack[-1][1]] += until - t
            t = until

    for start, end, bucket in spans:
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        advance(start)
        stack.append((end, bucket))
    advance(hi)


@dataclass
class _Scan:
    """One pass over the spans: per process the category-setting spans, span indices by role."""

    classified: list[list[tuple[int, int, str]]]
    by_role: dict[str, list[int]]
    bars: list[Bar]
    proc_run: list[int]


def account(capture: Capture, taxonomy: Taxonomy) -> Report:
    scan = _scan(capture, taxonomy)
    ordered = _iterations(capture, scan)
    rest = sorted(it.slowest[1] for it in ordered if not it.first)
    firsts = [it.slowest[1] for it in ordered if it.first]
    steps = StepStats(
        count=len(ordered),
        first=max(firsts) / 1e9 if firsts else None,
        median=median(rest) / 1e9 if rest else None,
        p90=_quantile(rest, 0.9) / 1e9 if rest else None,
        max=rest[-1] / 1e9 if rest else None,
    )
    others = [it for it in ordered if not it.first]
    phase_totals = {
        k: median([it.phases.get(k, 0) for it in others]) / 1e9
        for k in sorted({k for it in ordered for k in it.phases})
        if others
    }
    summaries, cut = _runs(capture, scan, ordered)
    median_step = {p: median(d) for p, d in _per_process_steps(ordered).items()}
    totals, startup_phases, per_process = _time(capture, scan, cut, median_step)
    first_step: dict[int, int] = {}
    for it in ordered:  # by run and number: a process's first is the first it appears in
        for p, ns in it.durations.items():
            first_step.setdefault(p, ns)
    resumed = {r.index: r.resumed_from for r in summaries}
    checkpoints = []
    for c in _checkpoints(capture, scan):
        at = resumed.get(c.run)
        if c.kind == "load" and c.iteration < 0 and at is not None:
            c = replace(c, iteration=at, resumed=True)
        checkpoints.append(c)
    runs = capture.runs
    return Report(
        start=runs[0].start,
        end=runs[-1].end,
        totals=totals,
        startup_phases=startup_phases,
        per_process=per_process,
        labels={pr.index: pr.label for pr in capture.processes},
        runs=summaries,
        iterations=ordered,
        steps=steps,
        phase_totals=phase_totals,
        first_steps={
            p: (ns / 1e9, median_step[p] / 1e9 if p in median_step else None) for p, ns in first_step.items()
        },
        checkpoints=checkpoints,
        bars=sorted(scan.bars, key=lambda b: (b.process, b.start, -b.end, b.row, b.name)),
        unknown=dict(capture.unknown),
        spans=capture.total,
    )


def _scan(capture: Capture, taxonomy: Taxonomy) -> _Scan:
    names = capture.names
    bucket_of: list[str | None] = []
    for name in names:
        category = taxonomy.category.get(name)
        bucket_of.append(f"{STARTUP}:{taxonomy.startup_phase[name]}" if category == STARTUP else category)
    role = {taxonomy.iteration: "iteration", taxonomy.interval: "interval", taxonomy.startup: "startup"}
    role.update(dict.fromkeys(taxonomy.step_phases, "phase"))
    role.update(dict.fromkeys(taxonomy.logging, "logging"))
    role.update(dict.fromkeys(taxonomy.save, "save"))
    role.update(dict.fromkeys(taxonomy.load, "load"))
    first_names = set(taxonomy.names_in(FIRST_ITERATION))
    role_of = [role.get(n, "first" if n in first_names else "") for n in names]
    scan = _Scan([[] for _ in capture.processes], defaultdict(list), [], [p.run for p in capture.processes])
    for i in range(len(capture)):
        n = capture.name[i]
        bucket = bucket_of[n]
        p = capture.process[i]
        if bucket is not None:
            scan.classified[p].append((capture.start[i], capture.end[i], bucket))
        r = role_of[n]
        if r:
            scan.by_role[r].append(i)
        if bucket is None or names[n] not in taxonomy.timeline:
            continue
        number = capture.iteration[i]
        label = str(number) if number >= 0 else ""
        row = _row(bucket, r)
        scan.bars.append(
            Bar(p, row, names[n], capture.start[i], capture.end[i], label, bool(capture.error[i]))
        )
    steps = capture.steps
    rows: dict[int, list[int]] = defaultdict(list)
    for k in sorted(range(len(steps)), key=lambda k: steps.start[k]):  # the iterations, in time order
        rows[steps.process[k]].append(k)
    for p, mine in rows.items():
        per_bar = -(-len(mine) // TIMELINE_BARS)
        for at in range(0, len(mine), per_bar):
            group = mine[at : at + per_bar]
            first, last = steps.number[group[0]], steps.number[group[-1]]
            label = (str(first) if first >= 0 else "") + (f"-{last}" if len(group) > 1 else "")
            start = steps.start[group[0]]
            end = max(steps.start[k] + steps.duration[k] for k in group)
            error = any(steps.error[k] for k in group)
            scan.bars.append(Bar(p, "iteration", taxonomy.iteration, start, end, label, error))
    # a save span inside another (checkpoint.save within exposed_save) is part of that save
    saves = scan.by_role["save"]
    save_ids = {(capture.process[i], capture.span_id[i]) for i in saves}
    scan.by_role["save"] = [i for i in saves if (capture.process[i], capture.parent_id[i]) not in save_ids]
    return scan


def _iterations(capture: Capture, scan: _Scan) -> list[Iteration]:
    """Iterations per run and number, with each process's step time and the slowest's phases.
    Kept small per process and iteration (the rows are arrays; this adds a duration a process to
    each iteration's dict), so a run of many ranks and iterations fits."""
    steps, proc_run = capture.steps, scan.proc_run
    per_iter: dict[tuple[int, int], Iteration] = {}
    seen: set[int] = set()
    order = sorted(range(len(steps)), key=steps.start.__getitem__)
    for k in order:
        p = steps.process[k]
        key = (proc_run[p], steps.number[k])
        item = per_iter.get(key)
        if item is None:
            item = per_iter[key] = Iteration(key[0], key[1], {})
        item.durations[p] = steps.duration[k]
        if p not in seen:
            seen.add(p)
            item.first = True
    # the slowest process's phases: of its rows (several when it ran an iteration twice)
    slowest = {key: item.slowest[0] for key, item in per_iter.items()}
    columns = sorted(steps.phases.items())
    for k in order:
        p = steps.process[k]
        key = (proc_run[p], steps.number[k])
        if slowest[key] == p:
            phases = per_iter[key].phases
            for name, column in columns:
                if column[k] >= 0:  # -1: no such phase span
                    phases[name] = phases.get(name, 0) + column[k]
    # logging beside the iteration: the iteration of the same process that started last before it
    by_process: dict[int, tuple[array[int], array[int]]] = {}
    for k in order:
        starts, numbers = by_process.setdefault(steps.process[k], (array("q"), array("q")))
        starts.append(steps.start[k])
        numbers.append(steps.number[k])
    for starts, numbers in by_process.values():  # ties in start: by number, as the keys sort
        pairs = sorted(zip(starts, numbers))
        starts[:] = array("q", [a for a, _ in pairs])
        numbers[:] = array("q", [b for _, b in pairs])
    for p, start, ns in zip(steps.log_process, steps.log_start, steps.log_duration):
        found = by_process.get(p)
        if found is None:
            continue
        at = bisect_right(found[0], start) - 1
        if at >= 0:
            key = (proc_run[p], found[1][at])
            if slowest[key] == p:
                phases = per_iter[key].phases
                phases["logging"] = phases.get("logging", 0) + ns
    return sorted(per_iter.values(), key=lambda it: (it.run, it.number))


def _runs(capture: Capture, scan: _Scan, ordered: list[Iteration]) -> tuple[list[RunSummary], dict[int, int]]:
    """Each run's summary, and per process of a run that a later run resumed from, the time
    after which its goodput is lost (the end of the save the later run resumed from)."""
    by_role, proc_run = scan.by_role, scan.proc_run
    save_end: dict[tuple[int, int], int] = {}  # (process, iteration) -> end of its save
    saves_by_run: dict[int, set[int]] = defaultdict(set)
    for i in by_role["save"]:
        p = capture.process[i]
        number = capture.iteration[i]
        if number >= 0 and not capture.error[i]:
            saves_by_run[proc_run[p]].add(number)
            save_end[(p, number)] = max(save_end.get((p, number), 0), capture.end[i])
    interval_first: dict[int, int] = {}
    failed: dict[int, bool] = defaultdict(bool)
    for i in by_role["interval"]:
        index = proc_run[capture.process[i]]
        if capture.iteration[i] >= 0:
            interval_first[index] = min(interval_first.get(index, 1 << 62), capture.iteration[i])
        failed[index] |= bool(capture.error[i])
    summaries = []
    for run in capture.runs:
        numbers = [it.number for it in ordered if it.run == run.index]
        summaries.append(
            RunSummary(
                run.index,
                run.start,
                run.end,
                list(run.processes),
                min(numbers) if numbers else interval_first.get(run.index),
                max(numbers) if numbers else None,
                sorted(saves_by_run.get(run.index, ())),
                failed[run.index],
            )
        )
    cut: dict[int, int] = {}
    for before, after in itertools.pairwise(summaries):
        resumed = interval_first.get(after.index)
        if resumed is None:
            continue
        after.resumed_from = resumed
        before.redone = sum(1 for it in ordered if it.run == before.index and it.number >= resumed)
        for p in before.processes:
            saved = save_end.get((p, resumed))
            if saved is None:  # not saved in this run: everything from that iteration on is lost
                later = [
                    capture.start[i]
                    for i in by_role["interval"]
                    if capture.process[i] == p and capture.iteration[i] >= resumed
                ]
                saved = min(later) if later else capture.processes[p].start
            cut[p] = saved
    return summaries, cut


def _time(
    capture: Capture, scan: _Scan, cut: dict[int, int], median_step: dict[int, float]
) -> tuple[dict[str, float], dict[str, float], dict[int, dict[str, float]]]:
    """The partition: job totals per category, start-up per phase, and per process."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    startup_phases: dict[str, float] = defaultdict(float)
    per_process: dict[int, dict[str, float]] = {}
    for run in capture.runs:
        share = 1.0 / len(run.processes)
        for p in run.processes:
            spans = sorted(scan.classified[p], key=lambda s: (s[0], -s[1], s[2]))  # any source: one order
            found: dict[str, int] = defaultdict(int)
            at = cut.get(p)
            if at is not None and run.start < at < run.end:
                _partition(spans, run.start, at, found)
                later: dict[str, int] = defaultdict(int)
                _partition(spans, at, run.end, later)
                later[PROGRESS_LOST] += later.pop(GOODPUT, 0)
                for bucket, ns in later.items():
                    found[bucket] += ns
            else:
                _partition(spans, run.start, run.end, found)
                if at is not None and at <= run.start:
                    found[PROGRESS_LOST] += found.pop(GOODPUT, 0)
            # first-iteration overhead: what the first step took beyond a typical one
            typical = min(found.get(FIRST_ITERATION, 0), int(median_step.get(p, 0)))
            if typical:
                found[FIRST_ITERATION] -= typical
                found[GOODPUT] += typical
            row = dict.fromkeys(CATEGORIES, 0.0)
            for bucket, ns in found.items():
                category, _, phase = bucket.partition(":")
                row[category] += ns / 1e9
                if category == STARTUP:
                    startup_phases[phase] += ns / 1e9 * share
            per_process[p] = row
            for category, value in row.items():
                totals[category] += value * share
    for before, after in itertools.pairwise(capture.runs):
        totals[RESTART] += (after.start - before.end) / 1e9
    return totals, dict(startup_phases), per_process


def _checkpoints(capture: Capture, scan: _Scan) -> list[Checkpoint]:
    """Per save (and load): the slowest process's time, and the interval (run) it is a share of."""
    interval_span: dict[tuple[int, int], tuple[int, int]] = {}
    for i in scan.by_role["interval"]:
        interval_span[(capture.process[i], capture.span_id[i])] = (capture.start[i], capture.end[i])
    found: dict[tuple[str, int, int], Checkpoint] = {}
    for kind in ("save", "load"):
        for i in scan.by_role[kind]:
            p = capture.process[i]
            index = scan.proc_run[p]
            took = (capture.end[i] - capture.start[i]) / 1e9
            if kind == "save":
                lo, hi = interval_span.get((p, capture.parent_id[i]), (capture.start[i], capture.end[i]))
            else:
                lo, hi = capture.runs[index].start, capture.runs[index].end
            key = (kind, index, capture.iteration[i])
            old = found.get(key)
            if old is None or took > old.seconds:
                found[key] = Checkpoint(kind, index, capture.iteration[i], took, (hi - lo) / 1e9)
    return sorted(found.values(), key=lambda c: (c.run, c.kind != "load", c.iteration))


def _row(bucket: str | None, role: str) -> str:
    if role == "iteration":
        return "iteration"
    if bucket is None:
        return "phase_other"
    category = bucket.split(":", 1)[0]
    return "interval" if category == GOODPUT else category


def _quantile(values: Sequence[int], q: float) -> float:
    """The q-quantile of sorted ``values`` (linear interpolation, as numpy's default)."""
    if len(values) == 1:
        return float(values[0])
    pos = (len(values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def _per_process_steps(iterations: Sequence[Iteration]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for item in iterations:
        if not item.first:
            for p, ns in item.durations.items():
                out[p].append(ns)
    return out
