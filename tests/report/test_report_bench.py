"""``python -m benchmarks.report_bench`` runs, small: two sizes, both paths, the closing lines
(the file path's memory ratio, the CPU a span of both). Its 1M-30M rows are not run in CI."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO


def test_report_bench_small():
    pytest.importorskip("chdb", reason="the report-store extra (chdb) is not installed")
    command = [sys.executable, "-m", "benchmarks.report_bench", "--sizes", "3000,9000", "--ranks", "2",
               "--iterations", "60"]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr  # 1: a memory ratio over the goal, which it prints
    rows = re.findall(r"^(file|chdb) path +([\d,]+) ", done.stdout, re.MULTILINE)
    assert [path for path, _ in rows] == ["file", "chdb", "file", "chdb"]
    assert rows[0][1] == rows[1][1] and rows[2][1] == rows[3][1]  # the same spans on both paths
    assert re.search(
        r"^file path peak memory: .* = [\d.]+x \(goal <= 1.5x\): (ok|HIGH)$", done.stdout, re.MULTILINE
    )
    cpu = re.findall(r"^CPU a span at [\d,]+: chdb path [\d.]+ us, file path", done.stdout, re.MULTILINE)
    assert len(cpu) == 2
