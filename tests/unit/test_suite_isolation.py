"""The suite runs against its own cache, never the user's ~/.cache (see tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from codegen.upstream import default_cache_dir


def _outside_home_cache(path: Path) -> bool:
    home_cache = (Path.home() / ".cache").resolve()
    return home_cache not in (path.resolve(), *path.resolve().parents)


def test_generator_cache_is_not_the_users() -> None:
    assert os.environ.get("CODEGEN_CACHE_DIR")
    assert _outside_home_cache(default_cache_dir())


def test_subprocesses_inherit_the_suite_cache() -> None:
    code = "from codegen.upstream import default_cache_dir; print(default_cache_dir())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()) == default_cache_dir()
    assert _outside_home_cache(Path(out.stdout.strip()))
