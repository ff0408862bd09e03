"""The README's and the guide's set-up command, run as written on a fresh copy of the repository:
a new virtual environment, the generator installed with the pinned versions, and `codegen apply
specs/` writing generated/, which must be the committed one."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.readme_blocks import REPO, SETUP, blocks

pytestmark = pytest.mark.slow
SKIP = shutil.ignore_patterns(
    ".venv", ".tox", ".git", "build", "out", "__pycache__", "*.egg-info", "taxonomy"
)


def _differences(left: Path, right: Path) -> list[str]:
    cmp = filecmp.dircmp(left, right)
    found = [f"{left}/{n}" for n in cmp.left_only + cmp.right_only + cmp.diff_files + cmp.funny_files]
    for sub in cmp.common_dirs:
        found += _differences(left / sub, right / sub)
    return found


def test_setup_block_runs_and_writes_the_committed_generated(tmp_path: Path) -> None:
    clone = tmp_path / "megatron-otel-codegen"
    shutil.copytree(REPO, clone, ignore=SKIP, symlinks=True)
    shutil.rmtree(clone / "generated")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    result = subprocess.run(
        ["bash", "-e", "-c", blocks(SETUP)["setup"]],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "warning" not in result.stderr, result.stderr[-3000:]
    assert _differences(clone / "generated", REPO / "generated") == []
