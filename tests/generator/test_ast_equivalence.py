"""Every before/after case is the pristine program once its instrumentation is removed, and the
remover only removes the generator's constructs."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.diagnostics import Diagnostics
from codegen.spec.load import load_project
from codegen.strip.equivalence import ast_dump, deinstrumented_ast, equivalent
from codegen.strip.ours import hook_codes
from tests.generator.support import CASES, make_project

ALL_CASES = sorted(p for p in CASES.iterdir() if p.is_dir())
CASE_DIRS = [p for p in ALL_CASES if (p / "output.py").is_file()]  # not refusals, no-ops
ALIAS, PARENT = "otel", "megatron"  # tests/fixtures/telemetry.yaml


@pytest.mark.parametrize("case", CASE_DIRS, ids=lambda p: p.name)
def test_case_is_pristine_once_deinstrumented(case: Path, tmp_path: Path) -> None:
    pristine = (case / "input.py").read_text(encoding="utf-8")
    output = (case / "output.py").read_text(encoding="utf-8")
    specs, _ = make_project(tmp_path, (case / "spec.yaml").read_text(encoding="utf-8"), None)
    codes = hook_codes(list(load_project(specs, Diagnostics()).hooks), ALIAS)
    assert ast_dump(output) != ast_dump(pristine)
    assert equivalent(pristine, output, ALIAS, PARENT, codes)


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda p: p.name)
def test_pristine_input_has_nothing_to_strip(case: Path) -> None:
    pristine = (case / "input.py").read_text(encoding="utf-8")
    assert deinstrumented_ast(pristine, ALIAS, PARENT) == ast_dump(pristine)


@pytest.mark.parametrize(
    "mutation",
    [
        ("        return iteration\n", "        iteration += 0\n        return iteration\n"),  # added code
        ("            iteration += 1\n", ""),  # a covered statement dropped
        (
            "    finally:\n        _otel.end_training()\n",
            "    except Exception:\n        _otel.end_training()\n",
        ),
    ],
)
def test_a_changed_program_is_not_equivalent(mutation: tuple[str, str]) -> None:
    """The check has teeth: an instrumentation that alters the program is caught."""
    pristine = (CASES / "hooks" / "input.py").read_text(encoding="utf-8")
    output = (CASES / "hooks" / "output.py").read_text(encoding="utf-8")
    old, new = mutation
    assert old in output
    assert not equivalent(pristine, output.replace(old, new), ALIAS, PARENT)
