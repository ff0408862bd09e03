"""The benchmarks README's per-span profile commands still run (nothing timed here)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", [[], ["--lean"]], ids=["sdk", "lean"])
def test_span_profile_runs(path: list[str]) -> None:
    command = [sys.executable, "-m", "benchmarks.span_profile", "--spans", "30", *path]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "training thread, per span" in result.stdout
    assert "runtime (otel_runtime) own code" in result.stdout


@pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="no valgrind on PATH: cache_profile needs cachegrind"
)
def test_cache_profile_runs() -> None:
    command = [sys.executable, "-m", "benchmarks.cache_profile", "--spans", "9"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        line.split()[0]: line.split()[1:]
        for line in result.stdout.splitlines()
        if line[:4] in ("lean", "SDK ")
    }
    assert set(rows) == {"lean", "SDK"}
    # a span of either path costs instructions and misses (the baseline run records none)
    assert all(float(v) > 0 for v in rows["lean"] + rows["SDK"])
