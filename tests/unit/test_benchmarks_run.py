"""The README's benchmark command still runs against the code the generator emits today.

The benchmark imports the generated fixture and reaches into it (the module's runtime name among
others), so a change to the generated code can break it without any other test noticing (the
runtime import's rename to ``_otel`` did). One round of the per-call rows, nothing timed here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_benchmark_runtime_rows_run_on_the_generated_fixture() -> None:
    command = [sys.executable, "-m", "benchmarks", "--quick", "--no-lens", "--no-generator", "--no-import"]
    result = subprocess.run(
        [*command, "--rounds", "1"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "function span, group disabled / uninstrumented" in result.stdout
    assert "enabled span, recording / SDK start_as_current_span" in result.stdout
