"""Which spans the Perfetto trace keeps: a window of ranks and iterations, so it stays openable.

ui.perfetto.dev loads a JSON trace in the browser tab; past about a million events (~150 MB of
JSON) it becomes slow or runs out of memory. So the trace keeps at most :data:`MAX_SPANS` spans
unless a window is asked for: a capture with fewer keeps every span; a larger one keeps every rank
and the first iterations that fit (with start-up before them), and the report says which.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from codegen.report.parse import Capture, Window

MAX_SPANS = 1_000_000


@dataclass(frozen=True)
class Chosen:
    window: Window
    iterations: tuple[int, int] | None  # the iteration numbers kept (None: all)
    ranks: tuple[int, ...] | None  # the ranks kept (None: all)
    note: str  # one line for the report's output


def parse_range(text: str) -> tuple[int, int]:
    """``A-B`` or ``A`` -> (A, B); ValueError on anything else."""
    first, dash, last = text.partition("-")
    lo = int(first)
    hi = int(last) if dash else lo
    if lo < 0 or hi < lo:
        raise ValueError(text)
    return lo, hi


def parse_ranks(text: str) -> tuple[int, ...]:
    """``0-3,8`` -> (0, 1, 2, 3, 8); ValueError on anything else."""
    found: set[int] = set()
    for part in text.split(","):
        lo, hi = parse_range(part.strip())
        found.update(range(lo, hi + 1))
    return tuple(sorted(found))


def choose(capture: Capture, ranks: Collection[int] | None = None,
           iterations: tuple[int, int] | None = None, limit: int = MAX_SPANS) -> Chosen:  # fmt: skip
    """The window: ``ranks`` and ``iterations`` as asked, else all when the capture has at most
    ``limit`` spans, else the first iterations whose estimated spans fit in ``limit``."""
    steps = capture.steps
    processes = [p for p in capture.processes if ranks is None or p.rank in ranks]
    if iterations is None and capture.total > limit and len(steps):
        per_row = capture.total / len(steps)  # spans per process and iteration, start-up included
        numbers = sorted({steps.number[k] for k in range(len(steps)) if steps.process[k] in
                          {p.index for p in processes}})  # fmt: skip
        fit = max(1, int(limit / (per_row * max(1, len(processes)))))
        if numbers and fit < len(numbers):
            iterations = (numbers[0], numbers[fit - 1])
    ranges: dict[tuple[object, ...], tuple[int, int]] = {}
    if iterations is None:
        for p in processes:
            ranges[p.key] = (p.start, p.end)
    else:
        a, b = iterations
        rows: dict[int, list[int]] = {}
        for k in range(len(steps)):
            rows.setdefault(steps.process[k], []).append(k)
        for p in processes:
            mine = rows.get(p.index, [])
            inside = [k for k in mine if a <= steps.number[k] <= b]
            if not inside:
                continue
            lo = min(steps.start[k] for k in inside)
            hi = max(steps.start[k] + steps.duration[k] for k in inside)
            if a <= min(steps.number[k] for k in mine):
                lo = p.start
            if b >= max(steps.number[k] for k in mine):
                hi = p.end
            ranges[p.key] = (lo, hi)
    what = [f"iterations {iterations[0]}-{iterations[1]}" if iterations else "every iteration"]
    what.append(f"ranks {_ranks_text(ranks)}" if ranks is not None else "every rank")
    note = f"trace window: {', '.join(what)} ({len(ranges)} process(es))"
    return Chosen(Window(ranges), iterations, tuple(sorted(ranks)) if ranks is not None else None, note)


def _ranks_text(ranks: Collection[int]) -> str:
    ordered = sorted(ranks)
    if ordered and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}" if len(ordered) > 1 else str(ordered[0])
    return ",".join(map(str, ordered))
