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

from tests.support.doc_blocks import REPO, SETUP, blocks

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


def _python3(version: str, folder: Path) -> Path | None:
    """A folder whose ``python3`` is Python ``version`` (the block says ``python3``), or None."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [
        shutil.which(f"python{version}"),
        *map(str, pyenv.glob(f"versions/{version}*/bin/python{version}")),
    ]
    runs = [  # a pyenv shim runs only where pyenv selects that version: the interpreter itself then
        c
        for c in candidates
        if c and subprocess.run([c, "-c", "pass"], capture_output=True, check=False).returncode == 0
    ]
    if not runs:
        return None
    found = runs[0]
    folder.mkdir()
    (folder / "python3").write_text(f'#!/bin/sh\nexec "{found}" "$@"\n')
    (folder / "python3").chmod(0o755)
    return folder


@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_setup_block_runs_and_writes_the_committed_generated(tmp_path: Path, version: str) -> None:
    """On Python 3.11 and 3.12 (the page says 3.11 or newer; the job's guides name 3.12)."""
    shims = _python3(version, tmp_path / "bin")
    if shims is None:
        pytest.skip(f"no python{version} on PATH to run the block with")
    clone = tmp_path / "megatron-otel-codegen"
    shutil.copytree(REPO, clone, ignore=SKIP, symlinks=True)
    shutil.rmtree(clone / "generated")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{shims}{os.pathsep}{env['PATH']}"
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
    ran = subprocess.run(
        [clone / ".venv" / "bin" / "python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout.strip() == version
    assert _differences(clone / "generated", REPO / "generated") == []
