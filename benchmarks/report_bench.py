"""``codegen report`` on a large synthetic capture: 1,000,000 spans from 8 ranks, in one run both as
one OTLP JSON file and as one file per rank (read by worker processes).

    .venv/bin/python -m benchmarks.report_bench [--spans N] [--ranks R] [--split | --one-file]
                                                [--keep DIR] [--no-reader]

Writes the capture (tests/report/synthetic.py), runs ``codegen report CAPTURE... --out DIR`` in a
subprocess per arm and prints for each: wall seconds, CPU seconds (user + sys of the report and its
workers: on a shared machine the wall time counts other processes' load too) and peak resident
memory (of the largest process, and summed over the report and its workers, sampled every 200 ms),
against the goals (60 s of CPU; memory bounded: well under the capture's size). Then the reader alone on rank 0's
file, its fast path against its checked path (``codegen/capture.py``), as CPU seconds and their
ratio. Not part of the test suite (tests/report/test_memory.py checks the memory bound on small
captures; tests/report/test_fast_reader.py that both reader paths give the same records).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 60.0


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and its descendants now (Linux /proc; 0 elsewhere)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)  # ppid
        rss[pid] = int(fields[21]) * page  # rss, in pages
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def _run(command: list[str]) -> tuple[float, float, float, float, str, str]:
    """(wall s, CPU s, peak RSS of the largest process MB, peak RSS summed over the tree MB, stdout,
    stderr) of one run of ``command``; CPU and the largest RSS from ``wait4`` (the process and its
    waited-for workers), the sum sampled every 200 ms."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, cwd=REPO)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                peak[0] = max(peak[0], _tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{stderr[-3000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return seconds, cpu, usage.ru_maxrss / 1024, peak[0] / 1e6, stdout, stderr


def _reader(path: Path) -> tuple[int, float, float]:
    """(records, fast-path CPU s, checked-path CPU s) reading ``path`` in this process."""
    import gc

    from codegen.capture import _File

    times = []
    records = 0
    for fast in (True, False):
        gc.collect()
        started = time.process_time()
        records = sum(1 for _ in _File(path, fast=fast).records())
        times.append(time.process_time() - started)
    return records, times[0], times[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    arms = parser.add_mutually_exclusive_group()
    arms.add_argument("--split", action="store_true", help="only the arm with one file per rank")
    arms.add_argument("--one-file", action="store_true", help="only the arm with one file")
    parser.add_argument("--keep", type=Path, help="write (or reuse) the captures in this folder")
    parser.add_argument("--no-reader", action="store_true", help="skip the reader's fast/checked row")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.report.synthetic import SPANS_PER_ITERATION, write_capture

    iterations = max(1, args.spans // (args.ranks * SPANS_PER_ITERATION))
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        one, split = folder / "capture.jsonl", folder / "capture"
        chosen = [(False, one)] * (not args.split) + [(True, split)] * (not args.one_file)
        for per_rank, capture in chosen:
            if not capture.exists():
                started = time.perf_counter()
                spans = write_capture(capture, ranks=args.ranks, iterations=iterations, split=per_rank)
                print(f"wrote {spans:,} spans ({'one file per rank' if per_rank else 'one file'}) "
                      f"in {time.perf_counter() - started:.1f} s")  # fmt: skip
        print(f"{'row':<34} {'wall':>8} {'CPU':>8} {'RSS max':>9} {'RSS sum':>9} {'capture':>8}  goal      "
              f"status  ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")  # fmt: skip
        for per_rank, capture in chosen:
            files = sorted(capture.glob("rank-*.jsonl")) if per_rank else [capture]
            out = Path(tmp) / "out"
            command = [sys.executable, "-m", "codegen", "report", *map(str, files), "--out", str(out)]
            seconds, cpu, rss_max, rss_sum, stdout, _ = _run(command)
            size_mb = sum(f.stat().st_size for f in files) / 1e6
            spans_text = next(line for line in stdout.splitlines() if line.startswith("Job:")).split(", ")[-1]
            # the goal is the report's own time: its CPU; the wall time also counts the machine's load
            slow = cpu > GOAL_S
            memory = "ok" if max(rss_max, rss_sum) < size_mb else "HIGH"
            failed |= slow or memory != "ok"
            status = "SLOW" if slow else "ok" if seconds <= GOAL_S else "ok (CPU; wall: load)"
            label = f"report, {len(files)} file{'s' * (len(files) > 1)}: {spans_text}"
            print(f"{label:<34} {seconds:>6.1f} s {cpu:>6.1f} s {rss_max:>6.0f} MB {rss_sum:>6.0f} MB "
                  f"{size_mb:>5.0f} MB  <= 60 s    {status}, memory {memory}")  # fmt: skip
        if not args.no_reader:
            path = min(split.glob("rank-*.jsonl")) if split.exists() else one
            records, fast, checked = _reader(path)
            label = f"reader, {path.name}: {records:,} spans"
            print(f"{label:<34} fast path {fast:.1f} s CPU, checked path {checked:.1f} s CPU: "
                  f"{fast / checked:.2f}x ({fast / records * 1e6:.0f} vs {checked / records * 1e6:.0f} us a span)")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
