"""The training thread's CPU per lean span against how long it waits between layers: where the
whole-process row's training-thread figure comes from.

    python -m benchmarks.pause_sweep [--rounds N] [--steps N] [--step-s S,S,...] [--out FILE]

``process_worker.py``'s step (786 spans under ``all``; after each layer and in each backward the
training thread sleeps as for a GPU, ``--step-s`` per step in all: a pause of step_s / 512 after
each layer) with its set-up (the runtime's own providers, OTLP/HTTP to the live receiver, export
running during the steps), arms ``off`` and ``lean`` in a shuffled order each round, for each
step length. The training thread's CPU inside its waits (the sleep's system call, the wake-up,
the GIL taken again) is counted apart from the CPU outside them, where the spans run
(``time.thread_time`` around each sleep). Reported per span, lean - off, paired by round: the
median and its 95% interval of the CPU outside the waits, and inside them.

The same spans cost the training thread several times as much after a long wait as after a short
one: once its core has run something else or slept, what a span touches (the interpreter's code
for its bytecodes, the runtime's code objects and data) is no longer in the caches. The whole
process row (``--step-s 1``: 2 ms pauses) measures that cold case; ``cache_profile.py`` counts the
misses.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

from benchmarks import print_table

REPO = Path(__file__).resolve().parents[1]
DEFAULT_STEPS_S = "0.02,0.1,0.3,1.0"


def _counting_sleep() -> tuple[Callable[[float], None], list[float]]:
    """A ``time.sleep`` for ``process_worker.step`` that counts the training thread's CPU inside
    it; the list's one item is the running total (seconds)."""
    inside = [0.0]
    sleep, thread_time = time.sleep, time.thread_time

    def counted(seconds: float) -> None:
        start = thread_time()
        sleep(seconds)
        inside[0] += thread_time() - start

    return counted, inside


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pause_sweep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=6, help="rounds per step length (default 6)")
    parser.add_argument("--steps", type=int, default=2, help="measured steps per run (default 2)")
    parser.add_argument(
        "--step-s", default=DEFAULT_STEPS_S, help=f"comma-separated step lengths (default {DEFAULT_STEPS_S})"
    )
    parser.add_argument("--out", type=Path, help="also write the table here")
    options = parser.parse_args()
    try:
        lengths = [float(value) for value in options.step_s.split(",") if value]
    except ValueError:
        parser.error(f"--step-s: not a comma-separated list of seconds: {options.step_s!r}")
    if not lengths or min(lengths) <= 0 or options.rounds < 1 or options.steps < 1:
        parser.error("--step-s needs lengths above 0, --rounds and --steps at least 1")
    for name in [name for name in os.environ if name.startswith(("OTEL_", "MEGATRON_OTEL_"))]:
        del os.environ[name]  # as benchmarks.run starts process_worker: the settings are its own
    sys.path.insert(0, str(REPO))
    from benchmarks import process_worker
    from benchmarks.receiver import ReceiverProcess
    from benchmarks.run import _interval

    with ReceiverProcess("http") as receiver:
        os.environ.update(receiver.environ)
        os.environ.update(
            MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_EXPORTER="otlp", MEGATRON_OTEL_METRICS_ENABLED="0",
            MEGATRON_OTEL_OWN_PROVIDERS="1",
        )  # fmt: skip
        import codegen.otel_runtime as otel

        sleep, inside = _counting_sleep()
        spans = process_worker.SPANS_PER_STEP
        order = random.Random(0)
        lines = [
            (
                "# the training thread's CPU per lean span (lean - off, paired by round), outside its waits"
                " and inside them"
            ),
            f"# command: python -m benchmarks.pause_sweep --rounds {options.rounds} --steps {options.steps}"
            f" --step-s {options.step_s}" + (f" --out {options.out}" if options.out else ""),
            (
                f"# python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
                f" at the start; {spans} spans a step; median [95% interval] of {options.rounds} rounds"
            ),
            f"{'step':>6s} {'pause':>8s}  {'outside the waits, us/span':>30s}  {'inside them, us/span':>26s}",
        ]
        for step_s in lengths:
            pause = step_s / (process_worker.MICROBATCHES * 2 * process_worker.LAYERS)
            outside: dict[str, list[float]] = {"off": [], "lean": []}
            waits: dict[str, list[float]] = {"off": [], "lean": []}
            for _ in range(options.rounds):
                arms = ["off", "lean"]
                order.shuffle(arms)
                for arm in arms:
                    process_worker.set_up(otel, arm)
                    process_worker.step(otel, pause, sleep)
                    inside[0] = 0.0
                    start = time.thread_time()
                    for _ in range(options.steps):
                        process_worker.step(otel, pause, sleep)
                    total = time.thread_time() - start
                    otel.reset()
                    outside[arm].append((total - inside[0]) / options.steps)
                    waits[arm].append(inside[0] / options.steps)
            cells = []
            for values in (outside, waits):
                differences = [
                    (a - o) * 1e6 / spans for a, o in zip(values["lean"], values["off"], strict=True)
                ]
                low, high = _interval(differences)
                cells.append(f"{median(differences):7.2f} [{low:6.2f}, {high:6.2f}]")
            lines.append(f"{step_s:5g}s {pause * 1e6:6.0f}us  {cells[0]:>30s}  {cells[1]:>26s}")
            print(lines[-1], file=sys.stderr)
    print_table(lines, options.out)


if __name__ == "__main__":
    main()
