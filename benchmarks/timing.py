"""Interleaved micro-timing: every variant is timed once per round, in a shuffled order.

Stdlib only: the runtime worker imports it under any interpreter (the nemo-lens run uses 3.13).
Machines are noisy, so a variant's cost is the minimum (and median) over many short rounds, and
the cost of the timing loop itself (a ``pass`` statement) is subtracted. Every variant runs once
in each round, so two variants' per-round costs pair by index (``rounds_ns``): a round slowed by
the rest of the machine slows both.
"""

from __future__ import annotations

import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Variant:
    name: str
    func: Callable[..., Any]
    args: tuple[Any, ...] = ()
    after_round: Callable[[], None] | None = None  # e.g. clear an in-memory exporter


@dataclass(frozen=True)
class Result:
    name: str
    min_ns: float  # per call, loop overhead subtracted
    median_ns: float
    samples: int
    rounds_ns: tuple[float, ...] = ()  # per round, in round order: pair two variants by index
    run: str = ""  # the measure() call that timed it: pair only within one

    def as_json(self) -> dict[str, Any]:
        """What a worker prints for ``benchmarks/run.py`` (``ratio_row`` reads it)."""
        return {
            "min_ns": self.min_ns,
            "median_ns": self.median_ns,
            "rounds_ns": self.rounds_ns,
            "run": self.run,
        }


def _timer(variant: Variant | None) -> timeit.Timer:
    if variant is None:
        return timeit.Timer("pass", timer=time.perf_counter)
    names = ", ".join(f"a{i}" for i in range(len(variant.args)))
    namespace: dict[str, Any] = {"f": variant.func}
    namespace.update({f"a{i}": arg for i, arg in enumerate(variant.args)})
    return timeit.Timer(f"f({names})", timer=time.perf_counter, globals=namespace)


def _calibrate(timer: timeit.Timer, target_s: float, cleanup: Callable[[], None] | None) -> int:
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if cleanup is not None:
            cleanup()
        if elapsed >= target_s / 4 or number >= 1 << 24:
            return max(1, int(number * target_s / max(elapsed, 1e-9)))
        number *= 4


def measure(variants: list[Variant], rounds: int, target_s: float, seed: int = 0) -> dict[str, Result]:
    """Time each variant ``rounds`` times, about ``target_s`` seconds per round, interleaved."""
    rng = random.Random(seed)
    null = _timer(None)
    timers = {v.name: _timer(v) for v in variants}
    by_name = {v.name: v for v in variants}
    null_number = _calibrate(null, target_s, None)
    numbers = {v.name: _calibrate(timers[v.name], target_s, v.after_round) for v in variants}
    raw: dict[str, list[float]] = {v.name: [] for v in variants}
    nulls: list[float] = []
    order = [v.name for v in variants]
    for _ in range(rounds):
        rng.shuffle(order)
        nulls.append(null.timeit(null_number) / null_number)
        for name in order:
            n = numbers[name]
            raw[name].append(timers[name].timeit(n) / n)
            cleanup = by_name[name].after_round
            if cleanup is not None:
                cleanup()
        gc.collect()
    loop_ns = min(nulls) * 1e9
    run = f"{time.time_ns():x}-{rng.random():.6f}"
    return {
        name: Result(
            name,
            max(min(samples) * 1e9 - loop_ns, 0.01),
            max(statistics.median(samples) * 1e9 - loop_ns, 0.01),
            len(samples),
            tuple(max(sample * 1e9 - loop_ns, 0.01) for sample in samples),
            run,
        )
        for name, samples in raw.items()
    }


def instruction_loops(variants: list[Variant], names: Sequence[str], n: int) -> None:
    """For callgrind (``callgrind_per_call``): before each loop an ``exec("pass")`` (its dump closes
    what came before), then the loop of ``n`` calls of each of ``names`` inside its own ``exec``
    (its dump holds the loop alone), after an empty loop (a ``pass`` body). Prints the dumps'
    order: ``loop``, then ``names``."""
    by_name = {v.name: v for v in variants}
    order = ["loop", *names]
    for name in order:
        variant = by_name.get(name)
        scope = {"f": variant.func if variant else None, "args": variant.args if variant else ()}
        body = "pass" if variant is None else "f(*args)"
        code = compile(f"for _ in range({n}):\n    {body}\n", name, "exec")
        # exec on purpose: callgrind dumps at each exec's end (S102)
        exec("for _ in range(3):\n    pass\n" if variant is None else "f(*args)", scope)  # noqa: S102
        exec("pass", {})  # noqa: S102
        exec(code, scope)  # noqa: S102
    json.dump({"order": order, "n": n}, sys.stdout)


def callgrind_per_call(command: list[str], calls: int, timeout: float = 900) -> dict[str, float]:
    """Instructions per call of each loop ``command`` (a worker calling ``instruction_loops`` with
    ``calls``) runs, the empty loop's taken out, counted by callgrind (one dump per ``exec``):
    repeatable to a fraction of an instruction per call, run to run and under load."""
    with tempfile.TemporaryDirectory(prefix="otel-callgrind-") as tmp:
        valgrind = [
            "valgrind",
            "--tool=callgrind",
            "--dump-after=builtin_exec",
            f"--callgrind-out-file={tmp}/cg",
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        proc = subprocess.run([*valgrind, *command], capture_output=True, text=True, timeout=timeout, env=env,
                              check=False)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(
                f"valgrind ... {Path(command[1]).name} exited {proc.returncode}: {proc.stderr[-1500:]}"
            )
        order = json.loads(proc.stdout)["order"]
        totals = callgrind_totals(Path(tmp))
        # per name: the warm-up exec, exec("pass"), the loop's exec
        tail = totals[-3 * len(order) :]
        loops = dict(zip(order, tail[2::3], strict=True))
    return {name: (count - loops["loop"]) / calls for name, count in loops.items() if name != "loop"}


def callgrind_totals(directory: Path) -> list[int]:
    """The instructions of each of callgrind's dumps in ``directory`` (``--callgrind-out-file=
    directory/cg``, ``--dump-after``), in the order they were written: ``cg.N`` is the dump after
    the N-th matching call (``cg`` alone, what ran after the last one, is left out)."""
    dumps = sorted(directory.glob("cg.*"), key=lambda p: int(p.name.split(".")[1]))
    totals = []
    for path in dumps:
        lines = path.read_text(errors="replace").splitlines()
        found = [line for line in lines if line.startswith(("summary:", "totals:"))]
        totals.append(int(found[0].split()[1]) if found else 0)
    return totals
