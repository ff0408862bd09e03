"""Trees instrumented before the runtime was imported under a private name (``from megatron
import otel``, ``otel.f(...)``) still strip: the AST-equivalence check and the in-place manifest
strip both forms, and re-applying the specs to an old fork gives what a fresh application gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codegen.diagnostics import Diagnostics
from codegen.pipeline import generate
from codegen.spec.load import load_project
from codegen.strip.equivalence import equivalent
from codegen.strip.ours import hook_codes
from tests.generator.support import DEMO, make_project
from tests.support.paths import CASES
from tests.support.transform_cases import CHANGED, expected_output, read

ALIAS, PARENT = "otel", "megatron"  # tests/fixtures/telemetry.yaml
IMPORT = "import megatron.otel as _otel\n"
# the cases whose edits name the runtime (the others have no old form), but for those whose
# source has a name 'otel' of its own (releases before the private name refused to instrument it)
# or spells '_otel' itself (an attribute, a keyword, a lambda's or comprehension's own name: the
# old form's renaming would reach those too)
CASE_DIRS = [
    p
    for p in CHANGED
    if IMPORT in expected_output(p)
    and not re.search(r"(?<![\w.])otel\b", read(p, "input.py"))
    and not re.search(r"\b_otel(?!_span)\b", read(p, "input.py"))
]


def legacy(output: str) -> str:
    """``output`` as releases before the private name wrote it."""
    assert IMPORT in output
    old = output.replace(IMPORT, "from megatron import otel\n")
    return re.sub(r"(?<![\w.])_otel\b", "otel", old)  # not _otel_span


@pytest.mark.parametrize("case", CASE_DIRS, ids=lambda p: p.name)
def test_an_old_form_case_is_pristine_once_deinstrumented(case: Path, tmp_path: Path) -> None:
    pristine = read(case, "input.py")
    output = expected_output(case)
    specs, _ = make_project(tmp_path, read(case, "spec.yaml"), None)
    codes = hook_codes(list(load_project(specs, Diagnostics()).hooks), ALIAS)
    old = legacy(output)
    assert "_otel." not in old and "from megatron import otel\n" in old
    assert equivalent(pristine, old, ALIAS, PARENT, codes)


@pytest.mark.parametrize("case", ["hooks", "wrap_argument_and_result", "flat_and_decorator_forms"])
def test_reapplying_to_an_old_fork_equals_a_fresh_application(case: str, tmp_path: Path) -> None:
    spec = read(CASES / case, "spec.yaml")
    output = expected_output(CASES / case)
    specs, root = make_project(tmp_path, spec, legacy(output))
    again = generate(specs, root)
    assert again.changes[DEMO][1] == output  # the old import goes, the new one comes
