"""Before/after cases in tests/transform_cases/<case>/: spec.yaml + input.py -> the expectation.

The expectation is one of:

- ``expected.diff``: the unified diff from ``input.py`` to the instrumented file (the changes
  alone, as a reviewer reads them). The case also proves a stable second pass (applying the specs
  to the output changes nothing) and that the output compiles. Rewrite the diffs after a
  deliberate change with ``pytest tests/generator --snapshot-update``.
- ``unchanged``: a no-op case; the file must come out byte for byte as it went in.
- ``error.txt``: a refusal; generating fails (exit 2) and every line of the file is part of one
  reported diagnostic line, in order.

A case may add ``check.py`` defining ``check(before, after, otel, exporter)``: an execution check
that gets the pristine module, the instrumented one (both imported from fresh trees as
``megatron.demo``), the runtime (every group enabled, spans going to ``exporter``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from codegen.atomic import write_files, write_tree
from codegen.diagnostics import SpecError
from codegen.pipeline import generate
from tests.generator.support import DEMO, make_project, pin_fixture_tree
from tests.support.modules import forget, import_fresh
from tests.support.transform_cases import (
    ALL_CASES,
    CHANGED,
    CHECKED,
    EXPECTATIONS,
    REFUSED,
    UNCHANGED,
    apply_diff,
    case_diff,
    expected_output,
    read,
)


def _project(tmp_path: Path, case: Path) -> tuple[Path, Path]:
    return make_project(tmp_path, read(case, "spec.yaml"), read(case, "input.py"))


def test_every_case_has_one_expectation() -> None:
    for case in ALL_CASES:
        kinds = [name for name in EXPECTATIONS if (case / name).is_file()]
        assert len(kinds) == 1, f"{case.name}: {kinds or 'no expectation'}"
    assert UNCHANGED and REFUSED and CHECKED


@pytest.mark.parametrize("case", CHANGED, ids=lambda p: p.name)
def test_expected_diff_is_the_diff_of_its_output(case: Path) -> None:
    """Applying a case's diff to its input rebuilds the text whose diff it is."""
    assert case_diff(read(case, "input.py"), expected_output(case)) == read(case, "expected.diff")


def test_a_diff_that_does_not_fit_its_input_is_refused() -> None:
    diff = read(CHANGED[0], "expected.diff")
    for source in ("", "x = 1\n" + read(CHANGED[0], "input.py")):
        with pytest.raises(ValueError, match="does not apply"):
            apply_diff(source, diff)
    with pytest.raises(ValueError, match="not a diff"):
        apply_diff(read(CHANGED[0], "input.py"), "")
    case = next(c for c in CHANGED if c.name == "recursion_inline")  # two hunks
    head, first, second = re.split(r"(?m)^(?=@@)", read(case, "expected.diff"))
    with pytest.raises(ValueError, match="out of order"):
        apply_diff(read(case, "input.py"), head + second + first)


@pytest.mark.parametrize("case", UNCHANGED, ids=lambda p: p.name)
def test_unchanged_case(case: Path, tmp_path: Path) -> None:
    specs, root = _project(tmp_path, case)
    generation = generate(specs, root)
    assert DEMO not in generation.changes
    assert (root / DEMO).read_text(encoding="utf-8") == read(case, "input.py")


@pytest.mark.parametrize("case", REFUSED, ids=lambda p: p.name)
def test_refused_case(case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs, root = _project(tmp_path, case)
    # the fixture tree as the pinned release: what does not resolve there is the spec's fault (exit 2)
    pin_fixture_tree(tmp_path / "cache", root, monkeypatch)
    with pytest.raises(SpecError) as raised:
        generate(specs)
    reported = raised.value.diagnostics.render()
    for expected in read(case, "error.txt").splitlines():
        if expected.strip():
            assert expected in reported, f"{case.name}: {expected!r} not in:\n{reported}"


@pytest.fixture
def fresh_megatron() -> Iterator[None]:
    yield
    forget("megatron")


@pytest.mark.parametrize("case", CHECKED, ids=lambda p: p.name)
def test_execution_check(case: Path, tmp_path: Path, fresh_megatron: None, exporter, provider) -> None:
    specs, root = _project(tmp_path, case)
    generation = generate(specs, root)
    fork = tmp_path / "fork"
    write_tree(fork, {p: new for p, (_, new) in generation.changes.items()}, base=root)
    before, _ = import_fresh(root)
    after, otel = import_fresh(fork)
    assert otel is not None and before is not after
    spec = importlib.util.spec_from_file_location(f"transform_check_{case.name}", case / "check.py")
    assert spec is not None and spec.loader is not None
    checker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checker)
    otel.enable("everything", tracer_provider=provider)
    try:
        checker.check(before, after, otel, exporter)
    finally:
        otel.disable()


@pytest.mark.parametrize("case", CHANGED, ids=lambda p: p.name)
def test_case(case: Path, tmp_path: Path, snapshot) -> None:
    specs, root = _project(tmp_path, case)
    generation = generate(specs, root)
    output = generation.changes[DEMO][1]
    snapshot.snapshot_dir = case
    snapshot.assert_match(case_diff(read(case, "input.py"), output), "expected.diff")
    compile(output, DEMO, "exec")

    # Second pass over the instrumented tree, runtime package included: nothing left to do.
    write_files(root, {path: new for path, (_, new) in generation.changes.items()})
    assert generate(specs, root).changes == {}


def _tokens(code: str) -> str:
    """``code`` without white space, commas and closing parentheses (what a split may add)."""
    return re.sub(r"[\s,)]", "", code)


def test_untouched_lines_are_byte_identical() -> None:
    """Lines the diff removes come back unchanged but for added indentation; only the import
    line the runtime alias is merged into may change, a call a wrap hook or a stream span rewrites
    keeps its text inside the wrapper, and hugged arguments may go one per line."""
    for case in CHANGED:
        source = read(case, "input.py").splitlines()
        output = expected_output(case).splitlines()
        removed = [l[2:] for l in difflib.ndiff(source, output) if l.startswith("- ")]
        added = [l[2:] for l in difflib.ndiff(source, output) if l.startswith("+ ")]
        spec = read(case, "spec.yaml")
        wraps = "wrap:" in spec or "stream:" in spec  # a wrapped call keeps its text inside the wrapper
        for line in removed:
            if line.startswith("from megatron import "):
                continue
            if wraps and any(line.strip().rstrip(",").split("  #")[0] in out for out in added):
                continue
            if "stream:" in spec and _tokens(line) in _tokens(
                re.sub(r"_otel\.stream\((_otel_span\w*,)?", "", " ".join(output))
            ):
                continue  # a one-line statement whose stream call was handed its span, split by black's rules
            parts = [p.strip() for p in line.split(",") if p.strip()]
            if len(parts) > 1 and all(any(out.strip() == p + "," for out in added) for p in parts):
                continue  # hugged arguments laid out one per line once re-indented past 100 columns
            assert any(
                out.endswith(line.lstrip()) and len(out) - len(out.lstrip()) > len(line) - len(line.lstrip())
                for out in added
            ), f"{case.name}: line lost or altered: {line!r}"
