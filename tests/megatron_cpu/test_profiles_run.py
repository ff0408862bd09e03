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


def test_export_profile_measures_every_span_on_its_own_thread() -> None:
    command = [sys.executable, "-m", "benchmarks.export_profile", "--spans", "1536"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # the export thread held back: a full batch must not wake it while the spans are recorded,
    # or it exports them and the profile times a wait for its lock
    assert "exported by the profiled thread: 1536 of 1536 spans" in result.stdout, result.stdout
    # then the work itself: the request and the encoding each take a share of the profile
    found = re.findall(
        r"^(HTTP request|runtime's own OTLP encoding)\b.*?([\d.]+)%", result.stdout, re.MULTILINE
    )
    shares = {category: float(share) for category, share in found}
    assert set(shares) == {"HTTP request", "runtime's own OTLP encoding"}, result.stdout
    assert all(share > 5 for share in shares.values()), shares


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


def _record_instructions(batch_size: str) -> dict[str, float]:
    """record_instructions' export parts per span, one step, ``batch_size`` spans a request."""
    command = [sys.executable, "-m", "benchmarks.record_instructions", "--steps", "1"]
    result = subprocess.run(
        [*command, "--batch-size", batch_size], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{batch_size} spans a request; requests sent: True" in result.stdout, result.stdout
    (export,) = [line for line in result.stdout.splitlines() if line.startswith("export:")]
    return {
        part: float(count.replace(",", ""))
        for part, count in re.findall(r"(take \+ ids|encode|send|free) ([\d,]+)", export)
    }


@pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="no valgrind on PATH: record_instructions needs callgrind"
)
def test_record_instructions_shares_a_request_over_its_batch() -> None:
    small, large = _record_instructions("64"), _record_instructions("256")
    assert set(small) == {"take + ids", "encode", "send", "free"}, small
    # a request's cost is mostly the same whatever it carries (the HTTP client's), so a span's
    # share of it falls with the batch; the encoding per span does not depend on the batch
    assert large["send"] < small["send"] / 2, (small, large)
    assert abs(large["encode"] - small["encode"]) < small["encode"] / 4, (small, large)


def test_record_instructions_says_what_is_wrong_with_its_batch_size() -> None:
    command = [sys.executable, "-m", "benchmarks.record_instructions", "--batch-size", "0"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--batch-size: 0 is not a positive number" in result.stderr
