"""Before/after cases in tests/transform_cases/<case>/: spec.yaml + input.py -> output.py.

Each case also proves a stable second pass (applying the specs to the output changes nothing)
and that the output compiles. Regenerate an expected file after a deliberate change with
``pytest tests/generator --snapshot-update``.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from codegen.pipeline import generate
from tests.generator.support import CASES, DEMO, make_project

CASE_DIRS = sorted(p for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASE_DIRS, ids=lambda p: p.name)
def test_case(case: Path, tmp_path: Path, snapshot) -> None:
    spec = (case / "spec.yaml").read_text(encoding="utf-8")
    specs, root = make_project(tmp_path, spec, (case / "input.py").read_text(encoding="utf-8"))
    generation = generate(specs, root)
    output = generation.changes[DEMO][1]
    snapshot.snapshot_dir = case
    snapshot.assert_match(output, "output.py")
    compile(output, DEMO, "exec")

    # Second pass over the instrumented tree, runtime package included: nothing left to do.
    for path, (_, new) in generation.changes.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(new, encoding="utf-8")
    assert generate(specs, root).changes == {}


def test_untouched_lines_are_byte_identical() -> None:
    """Lines the diff removes come back unchanged but for added indentation; only the import
    line the runtime alias is merged into may change, a call a wrap hook rewrites keeps its
    text inside the wrapper, and hugged arguments may go one per line."""
    for case in CASE_DIRS:
        source = (case / "input.py").read_text(encoding="utf-8").splitlines()
        output = (case / "output.py").read_text(encoding="utf-8").splitlines()
        removed = [l[2:] for l in difflib.ndiff(source, output) if l.startswith("- ")]
        added = [l[2:] for l in difflib.ndiff(source, output) if l.startswith("+ ")]
        wraps = "wrap:" in (case / "spec.yaml").read_text(encoding="utf-8")
        for line in removed:
            if line.startswith("from megatron import "):
                continue
            if wraps and any(line.strip().rstrip(",").split("  #")[0] in out for out in added):
                continue
            parts = [p.strip() for p in line.split(",") if p.strip()]
            if len(parts) > 1 and all(any(out.strip() == p + "," for out in added) for p in parts):
                continue  # hugged arguments laid out one per line once re-indented past 100 columns
            assert any(
                out.endswith(line.lstrip()) and len(out) - len(out.lstrip()) > len(line) - len(line.lstrip())
                for out in added
            ), f"{case.name}: line lost or altered: {line!r}"
