"""The bad-spec corpus: tests/bad_specs/<case>.yaml, each opening with the errors it must produce.

``# error: LINE:COL: message`` lines give the location in the case file and the start of the
message; ``# note: text`` lines give candidate lines listed under it. Every case must exit with
code 2, print no traceback, and write nothing.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from codegen.cli import main
from tests.generator.support import FIXTURES, pin_fixture_tree

CORPUS = Path(__file__).resolve().parents[1] / "bad_specs"
CASES = sorted(CORPUS.glob("*.yaml"))
EXPECT = re.compile(r"^# (error|note): (.*)$")


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_bad_spec(
    case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = [EXPECT.match(line) for line in case.read_bytes().decode("utf-8", "replace").splitlines()]
    errors = [m.group(2) for m in expected if m and m.group(1) == "error"]
    notes = [m.group(2) for m in expected if m and m.group(1) == "note"]
    assert errors, f"{case.name} declares no expected error"

    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(FIXTURES / "telemetry.yaml", specs / "telemetry.yaml")
    shutil.copy(case, specs / "case.yaml")
    generated = tmp_path / "generated"

    # The fixture tree is the pinned release: what does not resolve there is the spec's fault.
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(tmp_path / "cache"))
    pin_fixture_tree(tmp_path / "cache", FIXTURES / "src")
    code = main(["apply", str(specs), "--generated", str(generated)])
    err = capsys.readouterr().err

    assert code == 2, err
    assert "Traceback" not in err
    assert not generated.exists()
    reported = [line for line in err.splitlines() if ": error: " in line]
    for error in errors:
        location, message = error.split(": ", 1)
        prefix = f"case.yaml:{location}: error: {message}"
        assert any(prefix in line for line in reported), f"expected {prefix!r} in:\n{err}"
    for note in notes:
        assert f"    {note}" in err.splitlines(), f"expected note {note!r} in:\n{err}"
    assert len(reported) == len(errors), f"unexpected extra errors:\n{err}"
