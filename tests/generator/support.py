"""Build a throw-away spec directory and source tree for fixture-based generator tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from codegen.atomic import write_files
from tests.support.modules import with_pythonpath

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEMO = "megatron/demo.py"
PACKAGE_INFO = "megatron/core/package_info.py"
# One span on ``work`` of megatron/demo.py: the smallest spec, which tests extend with their own entries.
WORK_SPEC = """\
file: megatron/demo.py
spans:
  - name: demo.work
    group: step
    function: work
"""


def package_info(version: str) -> str:
    """A ``package_info.py`` saying ``version`` the way megatron-core does."""
    major, minor, patch = version.split(".")
    return f'MAJOR = {major}\nMINOR = {minor}\nPATCH = {patch}\nPRE_RELEASE = ""\n'


def make_project(
    tmp: Path, spec_text: str, source: str | None, extra_sources: dict[str, str] | None = None
) -> tuple[Path, Path]:
    """``(spec_dir, source_root)``: the shared fixture declarations plus ``spec_text``."""
    specs = tmp / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "telemetry.yaml", specs / "telemetry.yaml")
    (specs / "case.yaml").write_text(spec_text, encoding="utf-8")
    root = tmp / "src"
    files = {PACKAGE_INFO: package_info("0.0.0"), **(extra_sources or {})}  # the fixture pin's release
    if source is not None:
        files[DEMO] = source
    write_files(root, files)
    (root / "megatron").mkdir(parents=True, exist_ok=True)
    return specs, root


def pin_fixture_tree(
    cache: Path, source: Path, monkeypatch: pytest.MonkeyPatch | None = None, release: str = "0.0.0"
) -> Path:
    """Make ``source`` the fixture's unpacked ``release`` (its pin, or 0.0.1) in the upstream cache
    ``cache`` (``monkeypatch`` points ``CODEGEN_CACHE_DIR`` at it): a run without ``--source`` then
    instruments the pinned release, where a spec that does not resolve is exit 2, not a mismatch (3)."""
    if monkeypatch is not None:
        monkeypatch.setenv("CODEGEN_CACHE_DIR", str(cache))
    tree = cache / f"megatron-core-{release}-{release[-1] * 12}"  # the fixture's sha256: 0..., 1...
    tree.mkdir(parents=True)
    shutil.copytree(source / "megatron", tree / "megatron")
    (tree / ".complete").write_text(f"megatron-core=={release} fixture.whl\n")
    return tree


_KEEP_ALIVE = """
import sys
import megatron.demo
sys._kept_alive = megatron.demo  # the module outlives sys.modules, to the final clearing
"""


def _run_to_final_clearing(module: ModuleType, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    root = str(Path(module.__file__ or "").resolve().parents[1])
    return subprocess.run(
        [sys.executable, "-c", _KEEP_ALIVE],
        capture_output=True,
        text=True,
        timeout=120,
        env=with_pythonpath(root, env={**os.environ, **env}),
        check=False,
    )


def check_at_final_clearing(before: ModuleType, after: ModuleType, printed: str) -> None:
    """A transform case's execution check: ``megatron.demo`` kept alive to the interpreter's final
    clearing of modules (held by ``sys``, whose attributes outlive every module but builtins)
    prints ``printed`` pristine, and the same instrumented, telemetry off or on, with the
    runtime's name already None by then."""
    pristine = _run_to_final_clearing(before, {})
    assert pristine.returncode == 0 and pristine.stdout == printed, pristine
    for env in ({}, {"MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_EXPORTER": "none"}):
        instrumented = _run_to_final_clearing(after, env)
        assert instrumented.returncode == 0, instrumented
        assert instrumented.stdout == pristine.stdout, (env, instrumented)
        assert "Exception ignored" not in instrumented.stderr, (env, instrumented.stderr)
