"""``codegen report`` on a large synthetic capture: 1,000,000 spans from 8 ranks (one OTLP JSON file).

    .venv/bin/python -m benchmarks.report_bench [--spans N] [--ranks R] [--split] [--keep PATH]

Writes the capture (tests/report/synthetic.py), runs ``codegen report CAPTURE --out DIR`` in a
subprocess and prints: wall seconds and CPU seconds (on a shared machine the wall time counts
other processes' load too), and the subprocess's peak resident memory, against the goals (60 s;
memory bounded: well under the capture's size). Not
part of the test suite (tests/report/test_memory.py checks the memory bound on small captures).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--split", action="store_true", help="one file per rank, read by worker processes")
    parser.add_argument("--keep", type=Path, help="write (or reuse) the capture here (a folder with --split)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.report.synthetic import SPANS_PER_ITERATION, write_capture

    iterations = max(1, args.spans // (args.ranks * SPANS_PER_ITERATION))
    with tempfile.TemporaryDirectory() as tmp:
        capture = args.keep or Path(tmp) / ("capture" if args.split else "capture.jsonl")
        started = time.perf_counter()
        if not capture.exists():
            spans = write_capture(capture, ranks=args.ranks, iterations=iterations, split=args.split)
            print(f"wrote {spans:,} spans in {time.perf_counter() - started:.1f} s")
        files = sorted(capture.glob("rank-*.jsonl")) if args.split else [capture]
        out = Path(tmp) / "out"
        command = [sys.executable, "-m", "codegen", "report", *map(str, files), "--out", str(out)]
        started = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        rss_mb = usage.ru_maxrss / 1024
        cpu = usage.ru_utime + usage.ru_stime  # on a shared, loaded machine wall time overstates it
        size_mb = sum(f.stat().st_size for f in files) / 1e6
        spans_line = next(line for line in proc.stdout.splitlines() if line.startswith("Job:"))
        status = "ok" if seconds <= GOAL_S else "SLOW"
        print(
            f"{'row':<28} {'value':>12} {'goal':>12}  status  ({len(files)} file(s), {os.cpu_count()} CPUs)"
        )
        print(f"{'report: ' + spans_line.split(', ')[-1]:<28} {seconds:>10.1f} s {'<= 60 s':>12}  {status}")
        print(
            f"{'  CPU time (user + sys)':<28} {cpu:>10.1f} s {'<= 60 s':>12}  {'ok' if cpu <= GOAL_S else 'SLOW'}"
        )
        print(f"{'  peak RSS / capture size':<28} {rss_mb:>9.0f} MB {f'{size_mb:.0f} MB':>12}  "
              f"{'ok' if rss_mb < size_mb else 'HIGH'}")  # fmt: skip
    return 0 if seconds <= GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
