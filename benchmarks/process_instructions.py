"""Instructions per span in the whole process, counted by callgrind: repeatable on a loaded machine
where the CPU-time rows of ``process_worker.py`` move by microseconds from run to run.

    python -m benchmarks.process_instructions [--arms lean,sdk] [--steps 1,4] [--out FILE]

Each arm, and ``off``, runs ``process_worker.py``'s step (786 spans, the runtime's own providers,
OTLP/HTTP to the live receiver in a child process, the default batch size and delay) under
``valgrind --tool=callgrind --separate-threads=yes``, once with each of two step counts; the
difference between the two runs, per step, is what a step costs, per thread: the training thread
(the main thread) and every other thread of the process (the export thread and anything else
telemetry runs). An arm's row is that minus ``off``'s, per span. Valgrind runs one thread at a time,
so what the GIL's hand-offs cost in waiting is not here; what they cost in instructions is.
Needs valgrind; takes about 25 s a run (two per arm).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def count(arm: str, steps: int, step_s: float) -> dict[str, int]:
    """Instructions per thread of one worker run: ``main`` and ``other`` (every other thread)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
        env.setdefault("PYTHONPATH", str(REPO))
        command = [
            "valgrind", "--tool=callgrind", "--separate-threads=yes", "--dump-instr=no",
            f"--callgrind-out-file={tmp}/cg.%p", sys.executable, str(HERE / "process_worker.py"),
            "--arms", arm, "--rounds", "1", "--steps", str(steps), "--step-s", str(step_s),
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        totals: dict[str, int] = {"main": 0, "other": 0}
        for path in glob.glob(f"{tmp}/cg.*-*"):
            thread = int(path.rsplit("-", 1)[1])
            text = Path(path).read_text(errors="replace")
            found = re.search(r"^totals:\s+(\d+)", text, re.MULTILINE)
            totals["main" if thread == 1 else "other"] += int(found.group(1)) if found else 0
        return totals


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arms", default="lean")
    parser.add_argument("--steps", default="1,4", help="the two step counts")
    parser.add_argument("--step-s", type=float, default=0.2)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    low, high = (int(x) for x in options.steps.split(","))
    sys.path.insert(0, str(REPO))
    from benchmarks.process_worker import SPANS_PER_STEP

    per_step = {}
    for arm in ["off", *options.arms.split(",")]:
        a, b = count(arm, low, options.step_s), count(arm, high, options.step_s)
        per_step[arm] = {k: (b[k] - a[k]) / (high - low) for k in a}
        print(f"{arm}: {per_step[arm]}", file=sys.stderr)
    rows = {}
    for arm, cost in per_step.items():
        if arm != "off":
            rows[arm] = {k: (cost[k] - per_step["off"][k]) / SPANS_PER_STEP for k in ("main", "other")}
    lines = [
        f"instructions per span (callgrind, {low} and {high} steps of {SPANS_PER_STEP} spans, arm - off)",
        *(
            f"{arm}: training thread {r['main']:.0f}, other threads {r['other']:.0f}"
            for arm, r in rows.items()
        ),
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if options.out:
        options.out.write_text(text + json.dumps({"per_step": per_step, "per_span": rows}) + "\n")


if __name__ == "__main__":
    main()
