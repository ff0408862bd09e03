"""Build a throw-away spec directory and source tree for fixture-based generator tests."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = Path(__file__).resolve().parents[1] / "transform_cases"
DEMO = "megatron/demo.py"
PACKAGE_INFO = "megatron/core/package_info.py"


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
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "megatron").mkdir(parents=True, exist_ok=True)
    return specs, root


def pin_fixture_tree(cache: Path, source: Path) -> Path:
    """Make ``source`` the fixture pin's unpacked wheel in the upstream cache ``cache`` (point
    ``CODEGEN_CACHE_DIR`` at it): a run without ``--source`` then instruments it as the pinned
    release, where a spec that does not resolve is a spec error (exit 2), not a mismatch (3)."""
    tree = cache / "megatron-core-0.0.0-000000000000"
    tree.mkdir(parents=True)
    shutil.copytree(source / "megatron", tree / "megatron")
    (tree / ".complete").write_text("megatron-core==0.0.0 fixture.whl\n")
    return tree
