"""Every before/after case is the pristine program once its instrumentation is removed, and the
remover only removes the generator's constructs."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.diagnostics import Diagnostics
from codegen.spec.load import load_project
from codegen.strip.equivalence import ast_dump, deinstrumented_ast, equivalent
from codegen.strip.ours import hook_codes
from tests.generator.support import make_project
from tests.support.paths import CASES
from tests.support.transform_cases import ALL_CASES, CHANGED, expected_output, read

ALIAS, PARENT = "otel", "megatron"  # tests/fixtures/telemetry.yaml


@pytest.mark.parametrize("case", CHANGED, ids=lambda p: p.name)  # not refusals, no-ops
def test_case_is_pristine_once_deinstrumented(case: Path, tmp_path: Path) -> None:
    pristine = read(case, "input.py")
    output = expected_output(case)
    specs, _ = make_project(tmp_path, read(case, "spec.yaml"), None)
    codes = hook_codes(list(load_project(specs, Diagnostics()).hooks), ALIAS)
    assert ast_dump(output) != ast_dump(pristine)
    assert equivalent(pristine, output, ALIAS, PARENT, codes)


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda p: p.name)
def test_pristine_input_has_nothing_to_strip(case: Path) -> None:
    pristine = read(case, "input.py")
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
    pristine = read(CASES / "hooks", "input.py")
    output = expected_output(CASES / "hooks")
    old, new = mutation
    assert old in output
    assert not equivalent(pristine, output.replace(old, new), ALIAS, PARENT)
