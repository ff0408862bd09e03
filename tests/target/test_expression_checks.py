"""The static expression checks on the real specs and megatron-core 0.19.2: no false errors, no
warnings, and a typo in an attribute expression is caught with its spec location."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codegen.cli import main
from codegen.pipeline import Generation
from tests.support.paths import SPECS


def test_real_specs_check_clean(generation: Generation) -> None:
    assert generation.warnings == ()


def test_a_typo_in_self_attribute_is_a_located_error(
    generation: Generation,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(tmp_path / "cache"))
    specs = tmp_path / "specs"
    shutil.copytree(SPECS, specs)
    layers = specs / "layers.yaml"
    text = layers.read_text(encoding="utf-8")
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "self.layer_number" in row)
    layers.write_text(text.replace("self.layer_number", "self.layer_numbr", 1), encoding="utf-8")
    code = main(["validate", str(specs)])  # the pinned release (the generation fixture fetched it)
    err = capsys.readouterr().err
    assert code == 2, err
    errors = [row for row in err.splitlines() if ": error: " in row]
    assert len(errors) == 1, err
    assert f"layers.yaml:{line}:" in errors[0]
    assert "'self.layer_numbr' is not an attribute of" in errors[0]
    assert "did you mean 'layer_number'?" in errors[0]
