"""Build a throw-away spec directory and source tree for fixture-based generator tests."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = Path(__file__).resolve().parents[1] / "transform_cases"
DEMO = "megatron/demo.py"


def make_project(tmp: Path, spec_text: str, source: str | None, extra_sources: dict[str, str] | None = None) -> tuple[Path, Path]:
    """``(spec_dir, source_root)``: the shared fixture declarations plus ``spec_text``."""
    specs = tmp / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "telemetry.yaml", specs / "telemetry.yaml")
    (specs / "case.yaml").write_text(spec_text, encoding="utf-8")
    root = tmp / "src"
    files = dict(extra_sources or {})
    if source is not None:
        files[DEMO] = source
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "megatron").mkdir(parents=True, exist_ok=True)
    return specs, root
