"""Render: the report as plain text, for the terminal (``codegen report`` prints it)."""

from __future__ import annotations

from codegen.report.compute import Report
from codegen.report.taxonomy import CATEGORIES, FIRST_ITERATION, GOODPUT, STARTUP, TITLES


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f} s"
    if value >= 1:
        return f"{value:.2f} s"
    return f"{value * 1000:.1f} ms"


FIRST_RULE = (
    "first-iteration overhead, per process: its first step beyond its own median step (the median "
    "of its iterations after the first, not the step-time median over every run and rank)"
)
SHOWN_PROCESSES = 8


def first_iteration_items(report: Report) -> list[str]:
    """Per process (the first few), the figures the first-iteration rule used."""
    run_of = {p: r.index for r in report.runs for p in r.processes}
    items = sorted(report.first_steps.items(), key=lambda kv: (run_of.get(kv[0], 0), kv[0]))
    out = []
    for p, (first, own_median) in items[:SHOWN_PROCESSES]:
        overhead = report.per_process.get(p, {}).get(FIRST_ITERATION, 0.0)
        median_text = (
            seconds(own_median) if own_median is not None else "- (no other iteration: all of it counts)"
        )
        out.append(
            f"run {run_of.get(p, 0)} {report.labels[p]}: first {seconds(first)}, its median {median_text}, "
            f"overhead {seconds(overhead)}"
        )
    if len(items) > SHOWN_PROCESSES:
        out.append(f"... and {len(items) - SHOWN_PROCESSES} more processes")
    return out


def first_iteration_lines(report: Report) -> list[str]:
    """The first-iteration rule and, per process, the figures it used (the text report's lines)."""
    items = first_iteration_items(report)
    return [f"  {FIRST_RULE}:", *(f"    {item}" for item in items)] if items else []


def render_text(report: Report) -> str:
    wall = report.wall
    lines = [
        (
            f"Job: {wall:.3f} s wall time, {len(report.runs)} run{'s' if len(report.runs) != 1 else ''}, "
            f"{len(report.labels)} process{'es' if len(report.labels) != 1 else ''}, {report.spans:,} spans"
        ),
        f"Goodput: {report.goodput * 100:.1f}% ({seconds(report.totals[GOODPUT])} in productive training)",
        "",
        "Where the time went (share of wall time):",
    ]
    width = max(len(TITLES[c]) for c in CATEGORIES)
    for category in CATEGORIES:
        value = report.totals[category]
        share = value / wall * 100 if wall > 0 else 0.0
        lines.append(f"  {TITLES[category]:<{width}}  {seconds(value):>10}  {share:5.1f}%")
        if category == STARTUP:
            for phase, phase_seconds in report.startup_phases.items():
                if phase_seconds > 0:
                    lines.append(f"    {phase:<{width - 2}}  {seconds(phase_seconds):>10}")
    total = sum(report.totals.values())
    lines.append(f"  {'total':<{width}}  {seconds(total):>10}  {total / wall * 100 if wall else 0:5.1f}%")
    lines += ["", "Runs:"]
    for run in report.runs:
        what = [
            f"iterations {run.first_iteration}..{run.last_iteration}"
            if run.last_iteration is not None
            else "no iterations"
        ]
        what.append(f"saves at {', '.join(map(str, run.saves))}" if run.saves else "no saves")
        if run.resumed_from is not None:
            what.append(f"resumed from iteration {run.resumed_from}")
        if run.redone:
            what.append(f"{run.redone} iteration{'s' if run.redone != 1 else ''} redone by the next run")
        if run.failed:
            what.append("ended with an error")
        lines.append(
            f"  run {run.index}: {(run.end - run.start) / 1e9:.3f} s, {len(run.processes)} process(es); "
            + "; ".join(what)
        )
    steps = report.steps
    lines += ["", f"Iterations: {steps.count}"]
    if steps.count:
        lines.append(
            f"  step time (the slowest rank's, every run): first {seconds(steps.first)}; the others: "
            f"median {seconds(steps.median)}, "
            f"p90 {seconds(steps.p90)}, max {seconds(steps.max)}"
        )
        for phase, value in report.phase_totals.items():
            lines.append(f"    {phase}: median {seconds(value)}")
        lines += first_iteration_lines(report)
        if len(report.labels) > 1:
            # the first iteration apart (warm-up), and iterations where every rank took as long
            multi = [it for it in report.iterations if len(it.durations) > 1 and not it.first]
            uneven = [it for it in multi if it.spread > 0]
            if uneven:
                worst = max(uneven, key=lambda it: it.spread)
                counts: dict[int, int] = {}
                for it in uneven:
                    counts[it.slowest[0]] = counts.get(it.slowest[0], 0) + 1
                slowest = max(counts, key=lambda p: counts[p])
                lines.append(
                    f"  slowest rank most often: {report.labels[slowest]} ({counts[slowest]} of "
                    f"{len(multi)} iterations after the first); largest spread "
                    f"{seconds(worst.spread / 1e9)} at iteration {worst.number}"
                )
            elif multi:
                lines.append("  every rank took as long in every iteration after the first")
    if report.checkpoints:
        lines += ["", "Checkpoints:"]
        for c in report.checkpoints:
            at = f"iteration {c.iteration}" if c.iteration >= 0 else "(iteration not recorded)"
            at += f" (the iteration run {c.run} resumed from)" if c.resumed else ""
            span = "of its interval" if c.kind == "save" else "of the run"
            lines.append(f"  run {c.run} {c.kind} {at}: {seconds(c.seconds)} ({c.share * 100:.1f}% {span})")
    if report.unknown:
        lines += ["", "Span names not in the specs' taxonomy (counted only by their enclosing spans):"]
        for name, (count, where) in sorted(report.unknown.items()):
            lines.append(f"  {name}: {count} (first at {where})")
    return "\n".join(lines) + "\n"
