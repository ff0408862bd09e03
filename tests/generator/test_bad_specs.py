"""The bad-spec corpus: every user mistake ends in located errors, exit 2, no traceback, no output.

A case is either one file, ``tests/bad_specs/<case>.yaml`` (run as ``case.yaml`` beside the shared
fixture ``telemetry.yaml``), or a project-level case, a directory ``tests/bad_specs/<case>/`` whose
files are the whole spec directory (it brings its own ``telemetry.yaml``, or gets the shared one
when it has none).

In any case file, ``# error: LINE:COL: message`` lines give a location in that file and the start
of the message; ``# note: text`` lines give candidate lines listed under an error. Every expected
error must be reported and nothing else; every case must exit with code 2, print no traceback, and
write nothing.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from codegen.cli import main
from tests.generator.support import FIXTURES, pin_fixture_tree

CORPUS = Path(__file__).resolve().parents[1] / "bad_specs"
CASES = sorted(p for p in CORPUS.iterdir() if p.suffix == ".yaml" or p.is_dir())
EXPECT = re.compile(r"^# (error|note): (.*)$")


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60
    assert sum(1 for case in CASES if case.is_dir()) >= 8, "project-level cases"


def _expectations(path: Path) -> tuple[list[str], list[str]]:
    expected = [EXPECT.match(line) for line in path.read_bytes().decode("utf-8", "replace").splitlines()]
    errors = [m.group(2) for m in expected if m and m.group(1) == "error"]
    notes = [m.group(2) for m in expected if m and m.group(1) == "note"]
    return errors, notes


def _spec_dir(case: Path, specs: Path) -> dict[str, Path]:
    """Fill ``specs`` with the case's files; return {name in specs: the corpus file}."""
    specs.mkdir()
    if case.is_file():
        shutil.copy(FIXTURES / "telemetry.yaml", specs / "telemetry.yaml")
        shutil.copy(case, specs / "case.yaml")
        return {"case.yaml": case}
    files = {p.name: p for p in sorted(case.iterdir()) if p.is_file()}
    for name, path in files.items():
        shutil.copy(path, specs / name)
    if "telemetry.yaml" not in files:
        shutil.copy(FIXTURES / "telemetry.yaml", specs / "telemetry.yaml")
    return files


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_bad_spec(
    case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = tmp_path / "specs"
    files = _spec_dir(case, specs)
    errors: list[str] = []
    notes: list[str] = []
    for name, path in files.items():
        file_errors, file_notes = _expectations(path)
        errors += [f"{name}:{error}" for error in file_errors]
        notes += file_notes
    assert errors, f"{case.name} declares no expected error"
    generated = tmp_path / "generated"

    # The fixture tree is the pinned release: what does not resolve there is the spec's fault.
    pin_fixture_tree(tmp_path / "cache", FIXTURES / "src", monkeypatch)
    code = main(["apply", str(specs), "--generated", str(generated)])
    err = capsys.readouterr().err

    assert code == 2, err
    assert "Traceback" not in err
    assert not generated.exists()
    reported = [line for line in err.splitlines() if ": error: " in line]
    for error in errors:
        location, message = error.split(": ", 1)
        prefix = f"{location}: error: {message}"
        assert any(prefix in line for line in reported), f"expected {prefix!r} in:\n{err}"
    for note in notes:
        assert f"    {note}" in err.splitlines(), f"expected note {note!r} in:\n{err}"
    assert len(reported) == len(errors), f"unexpected extra errors:\n{err}"
    for line in reported:
        assert "(valid: )" not in line, "a list of valid values is never empty"
