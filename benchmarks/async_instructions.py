"""A disabled async span's instructions per call, counted by callgrind: repeatable on a loaded
machine where the timed serving row (``serving_bench.py``) moves by tens of nanoseconds.

    python -m benchmarks.async_instructions [--calls 20000]

An uninstrumented coroutine function and the same function under ``traced`` (the decorator form
the inference server's endpoints get), its group off, each called and driven to its end
(``coroutine.send(None)``), with the repository's runtime (``codegen/otel_runtime``). Each runs
under ``valgrind --tool=callgrind`` twice, with ``--calls`` and three times as many calls; the
difference, per call, is what one call costs. Needs valgrind; about 10 s a run (four runs).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MICRO = """
import sys
sys.path.insert(0, {repo!r})
from codegen import otel_runtime as otel

async def plain():
    return 1

@otel.traced("text_completion")
async def traced():
    return 1

def drive(fn):
    coroutine = fn()
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value

fn = {{"plain": plain, "traced": traced}}[sys.argv[1]]
for _ in range(int(sys.argv[2])):
    drive(fn)
"""


def count(variant: str, calls: int) -> int:
    """The instructions of one run of ``MICRO`` (``variant``, ``calls`` calls)."""
    with tempfile.TemporaryDirectory(prefix="otel-async-") as tmp:
        script = Path(tmp) / "micro.py"
        script.write_text(MICRO.format(repo=str(REPO)))
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg",
                   sys.executable, str(script), variant, str(calls)]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        found = re.search(r"Collected : ([\d,]+)", proc.stderr)
        if proc.returncode != 0 or found is None:
            raise RuntimeError(f"callgrind run of {variant} failed: {proc.stderr[-1500:]}")
        return int(found.group(1).replace(",", ""))


def per_call(calls: int) -> dict[str, float]:
    """Instructions per call of each variant (the run with 3x ``calls`` minus the one with
    ``calls``, over 2x ``calls``)."""
    return {v: (count(v, 3 * calls) - count(v, calls)) / (2 * calls) for v in ("plain", "traced")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    counts = per_call(args.calls)
    ratio = counts["traced"] / counts["plain"]
    print(
        f"async span (traced coroutine), group disabled / uninstrumented coroutine, Python "
        f"{sys.version_info.major}.{sys.version_info.minor}: {counts['traced']:,.0f} / "
        f"{counts['plain']:,.0f} instructions per call = {ratio:.3f}x (goal <= 1.5x: "
        f"{'met' if ratio <= 1.5 else 'NOT MET'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
