"""pre-commit for the tests: the README configuration's hook args, and pre-commit run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HOOK_ARGS = ["specs/", "--docs", "docs/otel"]  # the README's pre-commit configuration passes these


def pre_commit(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``pre-commit ARGS`` in ``cwd`` with ``PRE_COMMIT_HOME=home``, this interpreter's bin first on PATH."""
    env = dict(os.environ, PRE_COMMIT_HOME=str(home))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
