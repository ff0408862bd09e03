"""``codegen report`` at the scale of the export: 1M, 10M and 30M synthetic spans from 8 ranks, from
capture files (the Python reader) and from the trace store's schema in chdb (the store's queries).

    .venv/bin/python -m benchmarks.report_bench [--sizes 1M,10M,30M] [--paths file,chdb]
                                                [--ranks 8] [--iterations 5000] [--keep DIR] [--reader]

Every row has the same 8 ranks x 5,000 iterations; the spans per iteration grow (25, 250, 750: a
deeper model traced per layer, ``tests/report/synthetic.py``'s layer spans per microbatch), so
the rows show what the report's memory does with the number of spans. Per size, per path, in
subprocesses: the file path writes one OTLP JSON file per rank and runs ``codegen report
FILES...`` (worker processes read the files, one per CPU); the chdb path writes the same spans as
the ClickHouse exporter's rows, loads them into ``otel_traces`` (the exporter's DDL) in a chdb
folder (the load timed apart: in production the Collector does it) and runs ``codegen report
--store chdb:DIR``. Each prints the wall seconds, the CPU seconds (user + sys of the report and
its workers, from ``wait4``; chdb's threads included), the CPU microseconds a span, and the peak
resident memory (of the largest process, and summed over the report and its workers, sampled
every 200 ms). The last lines: the file path's peak at the largest size over its peak at the
smallest (goal <= 1.5x), and the chdb path's CPU per span against the file path's. Without
``--out`` (the figures only): ``--out`` adds the Perfetto trace's window, a second read of the
files (at most 1,000,000 spans kept). Files are written as streams (one batch of spans in memory)
and removed after their row unless ``--keep``. ``--reader``: also the reader alone on rank 0's
file, its fast path against its checked path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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


SIZES = {"1M": 1_000_000, "10M": 10_000_000, "30M": 30_000_000}
LOAD = """
import sys
from pathlib import Path
from codegen.report.store import EXPORTER_DDL, ChdbConnection, insert_rows
Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
connection = ChdbConnection(sys.argv[1])
connection.execute(EXPORTER_DDL.format(table="otel_traces"))
for rows in sys.argv[2:]:
    insert_rows(connection, Path(rows))
connection.close()
"""


def _size(text: str) -> int:
    return SIZES.get(text) or int(text.replace("_", ""))


def _layers(spans: int, ranks: int, iterations: int) -> int:
    from tests.report.synthetic import spans_per_iteration

    per_iteration = spans / (ranks * iterations)
    return max(
        1, round((per_iteration - spans_per_iteration(0)) / (spans_per_iteration(1) - spans_per_iteration(0)))
    )


def _row(label: str, command: list[str], spans: int) -> tuple[float, float]:
    seconds, cpu, rss_max, rss_sum, stdout, _ = _run(command)
    found = next((line for line in stdout.splitlines() if line.startswith("Job:")), "")
    if f"{spans:,} spans" not in found:
        raise SystemExit(f"{label}: the report counted other spans than written: {found!r}")
    print(f"{label:<26} {spans:>12,} {seconds:>8.1f} s {cpu:>8.1f} s {cpu / spans * 1e6:>7.2f} us "
          f"{rss_max:>7.0f} MB {rss_sum:>7.0f} MB", flush=True)  # fmt: skip
    return cpu, max(rss_max, rss_sum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1M,10M,30M", help="spans per row: 1M, 10M, 30M or a number")
    parser.add_argument("--paths", default="file,chdb", help="file, chdb or both")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--keep", type=Path, help="write (or reuse) the captures in this folder")
    parser.add_argument("--reader", action="store_true", help="also the reader's fast/checked row")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.report.synthetic import spans_per_iteration, write_capture

    paths = [p for p in args.paths.split(",") if p]
    if not set(paths) <= {"file", "chdb"}:
        parser.error("--paths: file, chdb or both")
    sizes = [_size(s) for s in args.sizes.split(",")]
    peaks: dict[str, list[tuple[int, float]]] = {p: [] for p in paths}
    cpus: dict[str, dict[int, float]] = {p: {} for p in paths}
    print(
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {args.ranks} ranks x {args.iterations:,} iterations"
    )
    print(
        f"{'row':<26} {'spans':>12} {'wall':>10} {'CPU':>10} {'CPU/span':>10} {'RSS max':>10} {'RSS sum':>10}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        for size in sizes:
            layers = _layers(size, args.ranks, args.iterations)
            shape = dict(
                ranks=args.ranks, iterations=args.iterations, save_every=500, eval_every=1000, layers=layers
            )
            for path in paths:
                folder = base / f"{path}-{size}"
                marker = folder / "spans"
                if not marker.exists():
                    shutil.rmtree(folder, ignore_errors=True)
                    started = time.perf_counter()
                    if path == "file":
                        spans = write_capture(folder / "capture", split=True, **shape)
                    else:
                        spans = write_capture(folder / "rows", split=True, rows=True, **shape)
                        rows = sorted((folder / "rows").glob("rank-*.jsonl"))
                        loaded = time.perf_counter()
                        _run([sys.executable, "-c", LOAD, str(folder / "db"), *map(str, rows)])
                        print(
                            f"  (chdb: {spans:,} spans loaded into otel_traces in {time.perf_counter() - loaded:.1f} s)"
                        )
                        shutil.rmtree(folder / "rows")
                    marker.write_text(str(spans))
                    print(f"  ({path}: wrote {spans:,} spans, {spans_per_iteration(layers)} a rank-iteration, "
                          f"in {time.perf_counter() - started:.1f} s)", flush=True)  # fmt: skip
                spans = int(marker.read_text())
                report = [sys.executable, "-m", "codegen", "report"]
                if path == "file":
                    files = sorted((folder / "capture").glob("rank-*.jsonl"))
                    command = [*report, *map(str, files)]
                else:
                    command = [*report, "--store", f"chdb:{folder / 'db'}"]
                cpu, peak = _row(f"{path} path", command, spans)
                peaks[path].append((spans, peak))
                cpus[path][size] = cpu / spans
                if args.keep is None:
                    shutil.rmtree(folder)
        if args.reader:
            capture = base / "reader"
            write_capture(capture, ranks=args.ranks, iterations=args.iterations, split=True)
            records, fast, checked = _reader(min(capture.glob("rank-*.jsonl")))
            print(f"reader, rank 0's file: {records:,} spans: fast path {fast:.1f} s CPU, checked path "
                  f"{checked:.1f} s CPU: {fast / checked:.2f}x")  # fmt: skip
    failed = False
    if len(peaks.get("file", [])) > 1:
        (small, first), (large, last) = peaks["file"][0], peaks["file"][-1]
        ratio = last / first
        failed = ratio > 1.5
        print(f"file path peak memory: {last:.0f} MB at {large:,} spans / {first:.0f} MB at {small:,} spans = "
              f"{ratio:.2f}x (goal <= 1.5x): {'HIGH' if failed else 'ok'}")  # fmt: skip
    for size in sizes:
        if size in cpus.get("file", {}) and size in cpus.get("chdb", {}):
            file_us, chdb_us = cpus["file"][size] * 1e6, cpus["chdb"][size] * 1e6
            print(f"CPU a span at {size:,}: chdb path {chdb_us:.2f} us, file path {file_us:.2f} us "
                  f"({file_us / chdb_us:.1f}x the chdb path's)")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
