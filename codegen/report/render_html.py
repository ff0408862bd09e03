"""Render: the self-contained HTML page (``templates/goodput/page.*``).

The page carries its data as inline JSON and draws its four plots as SVG with a small inline
script (``page.js``, about 200 lines): no plotting library, no network access. A library was
weighed: Plotly (MIT) is 3.5 MB minified, Chart.js (MIT) ~200 kB and draws on a canvas (nothing
for a test or a screen reader to find), uPlot (MIT) ~50 kB but line charts only; the four plots
here (a stacked bar, lanes of rectangles, a line, a grid of cells) are a few SVG elements each,
so a vendored, pinned dependency would cost more than it saves.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from codegen import TEMPLATES_DIR
from codegen.report.compute import Iteration, Report
from codegen.report.render_text import FIRST_RULE, first_iteration_items, seconds
from codegen.report.taxonomy import CATEGORIES, GOODPUT, TITLES

TEMPLATE_DIR = "goodput"
COLORS = {
    "goodput": "#2e8b57",
    "startup": "#5b7db1",
    "checkpoint_load": "#8e6bbf",
    "checkpoint_save": "#d68a1c",
    "evaluation": "#2aa6b5",
    "data_loading": "#b5a22a",
    "first_iteration": "#c0607a",
    "progress_lost": "#c0392b",
    "restart": "#7f8c8d",
    "unaccounted": "#c8ccd3",
}
# timeline lanes: (row of compute.Bar, title, colour key)
LANES = (
    ("startup", "startup", "startup"),
    ("interval", "interval", "goodput"),
    ("iteration", "iteration", "goodput"),
    ("first_iteration", "first iter.", "first_iteration"),
    ("data_loading", "data", "data_loading"),
    ("checkpoint_load", "ckpt load", "checkpoint_load"),
    ("checkpoint_save", "ckpt save", "checkpoint_save"),
    ("evaluation", "evaluation", "evaluation"),
)
HEAT_COLUMNS = 600  # iterations are binned (the slowest in each bin) beyond this many
# Pictures of big runs, drawn from the aggregates (the same from files or a store):
HEAT_ROWS = 128  # beyond this many processes, consecutive ranks share a row (the slowest of them)
# beyond, the timeline draws the ranks slowest most often (up to half), then the lowest
TIMELINE_PROCESSES = 32
STEP_POINTS = 2000  # beyond, each point of the step plot is the slowest of consecutive iterations of a run


def page_data(report: Report) -> dict[str, Any]:
    origin = report.start
    wall = report.wall
    lane_index = {row: k for k, (row, _, _) in enumerate(LANES)}
    processes = _timeline_processes(report)
    shown = set(processes)
    bars = [
        [
            b.process,
            lane_index[b.row],
            (b.start - origin) / 1e9,
            (b.end - origin) / 1e9,
            b.name,
            b.label,
            b.error,
        ]
        for b in report.bars
        if b.row in lane_index and b.process in shown
    ]
    steps = [
        [it.run, it.number, it.slowest[1] / 1e9, it.first, report.labels[it.slowest[0]]]
        for it in _step_points(report)
    ]
    return {
        "wall": wall,
        "goodput": report.goodput,
        "categories": [
            {
                "key": c,
                "title": TITLES[c],
                "seconds": report.totals[c],
                "text": seconds(report.totals[c]),
                "share": report.totals[c] / wall if wall > 0 else 0.0,
                "color": COLORS[c],
            }
            for c in CATEGORIES
        ],
        "lanes": [{"title": title, "color": COLORS[color]} for _, title, color in LANES],
        "processes": [
            {"index": p, "label": f"run {_run_of(report, p)}: {report.labels[p]}"} for p in processes
        ],
        "processIndex": {str(p): k for k, p in enumerate(processes)},
        "runs": [{"start": (r.start - origin) / 1e9, "end": (r.end - origin) / 1e9} for r in report.runs],
        "bars": bars,
        "steps": steps,
        "stepMedian": report.steps.median,
        "heat": _heat(report),
    }


def _timeline_processes(report: Report) -> list[int]:
    """The processes the timeline draws: all up to TIMELINE_PROCESSES; beyond, the ones slowest
    most often (strictly slowest, up to half of them), then the lowest (run, rank)."""
    ordered = sorted(report.labels, key=lambda p: (_run_of(report, p), p))
    if len(ordered) <= TIMELINE_PROCESSES:
        return ordered
    slowest = Counter(
        it.slowest[0]
        for it in report.iterations
        if not it.first and sorted(it.durations.values())[-2:].count(it.slowest[1]) == 1  # no tie
    )
    chosen = {p for p, _ in slowest.most_common(TIMELINE_PROCESSES // 2)}
    for p in ordered:
        if len(chosen) >= TIMELINE_PROCESSES:
            break
        chosen.add(p)
    return [p for p in ordered if p in chosen]


def _step_points(report: Report) -> list[Iteration]:
    """The iterations the step plot draws: all up to STEP_POINTS; beyond, the slowest of each group
    of consecutive iterations of one run (a first iteration stays a point of its own)."""
    items = report.iterations
    if len(items) <= STEP_POINTS:
        return items
    per_point = -(-len(items) // STEP_POINTS)
    points: list[Iteration] = []
    group: list[Iteration] = []
    for it in [*items, None]:
        if group and (it is None or it.first or it.run != group[0].run or len(group) >= per_point):
            points.append(max(group, key=lambda g: g.slowest[1]))
            group = []
        if it is not None:
            group.append(it)
            if it.first:
                points.append(it)
                group = []
    return points


def _run_of(report: Report, process: int) -> int:
    return next((r.index for r in report.runs if process in r.processes), 0)


def _heat(report: Report) -> dict[str, Any]:
    """Rows: the processes of runs with several; columns: their iterations (binned when many)."""
    runs = {r.index for r in report.runs if len(r.processes) > 1}
    items = [it for it in report.iterations if it.run in runs]
    if not items:
        return {"rows": [], "columns": [], "min": 0, "max": 0}
    per_bin = max(1, -(-len(items) // HEAT_COLUMNS))
    bins = [items[k : k + per_bin] for k in range(0, len(items), per_bin)]
    columns = [
        f"run {b[0].run} iteration {b[0].number}" + (f"-{b[-1].number}" if len(b) > 1 else "") for b in bins
    ]
    processes = sorted({p for it in items for p in it.durations})
    per_row = -(-len(processes) // HEAT_ROWS)
    rows = []
    values_all: list[float] = []
    for at in range(0, len(processes), per_row):
        group = processes[at : at + per_row]
        values: list[float | None] = []
        for b in bins:
            found = [it.durations[p] / 1e9 for it in b for p in group if p in it.durations and not it.first]
            values.append(max(found) if found else None)
        values_all += [v for v in values if v is not None]
        label = report.labels[group[0]] + (f" to {report.labels[group[-1]]}" if len(group) > 1 else "")
        rows.append({"label": label, "values": values})
    return {
        "rows": rows,
        "columns": columns,
        "min": min(values_all) if values_all else 0,
        "max": max(values_all) if values_all else 0,
    }


def _json(value: Any) -> Markup:
    """JSON safe inside a <script> element (no "</" can end it early)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return Markup(text.replace("</", "<\\/").replace("<!--", "<\\!--"))


def render_html(report: Report, title: str, templates_dir: Path = TEMPLATES_DIR) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    folder = templates_dir / TEMPLATE_DIR
    data = page_data(report)
    steps = report.steps
    if steps.count:
        steps_note = (
            f"The slowest rank's step time per iteration, every run (x: iteration, y: step time). First "
            f"iteration {seconds(steps.first)}; the others: median {seconds(steps.median)}, p90 "
            f"{seconds(steps.p90)}, max {seconds(steps.max)}."
        )
    else:
        steps_note = "No iteration spans (record the step group, e.g. --otel-span-groups per_step)."
    heat = data["heat"]
    heat_note = (
        "Each row a rank, each column an iteration (the slowest when binned); darker is slower."
        if heat["rows"]
        else "A per-rank strip needs a run with several exporting ranks."
    )
    summary = (
        f"Wall time {seconds(report.wall)}; goodput {report.goodput * 100:.1f}% "
        f"({seconds(report.totals[GOODPUT])}); {len(report.runs)} run(s), {len(report.labels)} process(es), "
        f"{report.spans:,} spans."
    )
    return env.get_template(f"{TEMPLATE_DIR}/page.html.j2").render(
        title=title,
        summary=summary,
        css=Markup((folder / "page.css").read_text(encoding="utf-8")),
        script=Markup((folder / "page.js").read_text(encoding="utf-8")),
        data=_json(data),
        categories=data["categories"],
        startup_phases=[(name, seconds(value)) for name, value in report.startup_phases.items() if value > 0],
        steps_note=steps_note,
        first_rule=(
            FIRST_RULE[0].upper() + FIRST_RULE[1:] + ". " + "; ".join(first_iteration_items(report)) + "."
            if report.first_steps
            else "No iterations: no first-iteration overhead."
        ),
        colors=COLORS,
        heat_note=heat_note,
        checkpoints=[
            {
                "run": c.run,
                "kind": c.kind,
                "iteration": c.iteration if c.iteration >= 0 else "-",
                "resumed": c.resumed,
                "text": seconds(c.seconds),
                "share": f"{c.share * 100:.1f}%",
            }
            for c in report.checkpoints
        ],
    )
