"""The benchmarks README's per-span profile commands still run (nothing timed here).

Here, in the ``runtime`` environment: span_profile exports to the tests' OTLP receiver, which
decodes protobuf (not installed in the ``test`` environment)."""

from __future__ import annotations

import re
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
    command = [sys.executable, "-m", "benchmarks.cache_profile", "--spans", "30"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    table = [line.split() for line in result.stdout.splitlines() if not line.startswith("#")]
    rows = {cells[0]: cells for cells in table if cells[0] in ("lean", "SDK") and cells[1] != "/"}
    assert set(rows) == {"lean", "SDK"}, result.stdout
    instructions = {path: float(cells[1]) for path, cells in rows.items()}
    misses = {path: float(cells[-1]) for path, cells in rows.items()}
    # per span, against a baseline run that records none (both with a fixed hash seed, so the
    # difference is the spans' own at any --spans): the SDK path's several times the lean path's
    assert 0 < instructions["lean"] < instructions["SDK"] / 4, result.stdout
    assert 0 < misses["lean"] < misses["SDK"] / 2, result.stdout


def test_pause_sweep_runs() -> None:
    command = [sys.executable, "-m", "benchmarks.pause_sweep", "--rounds", "1", "--steps", "1"]
    result = subprocess.run(
        [*command, "--step-s", "0.02,0.05"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if not line.startswith("#")][1:]
    # one row per step length: its pause after each layer, then two medians with their intervals
    assert [row.split()[:2] for row in rows] == [["0.02s", "39us"], ["0.05s", "98us"]]
    for row in rows:
        assert len(re.findall(r"-?\d+\.\d\d\b", row)) == 6, result.stdout


def test_pause_sweep_says_what_is_wrong_with_its_step_lengths() -> None:
    command = [sys.executable, "-m", "benchmarks.pause_sweep", "--step-s", "0.1,x"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--step-s: not a comma-separated list of seconds: '0.1,x'" in result.stderr
