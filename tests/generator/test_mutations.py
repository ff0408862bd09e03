"""No user mistake ends in an internal error: every one-line mutation of a valid project (a line
dropped, or a value replaced by another type, an empty or multi-line string, a bad expression)
either still generates code that compiles, or is reported as located spec errors (exit 2)."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest

from codegen.diagnostics import SpecError
from codegen.pipeline import generate
from tests.generator.support import FIXTURES, pin_fixture_tree

SPECS = FIXTURES / "mutation_specs"
VALUES = (
    "[]",
    "{}",
    "1",
    "-1",
    "null",
    "true",
    '"x"',
    "[a, b]",
    "{a: b}",
    "''",
    '"a\\nb"',
    '"self.nope"',
    '"x("',
)
VALUE_LINE = re.compile(r"^(\s*-?\s*[A-Za-z_.]+:\s*)(.+)$")
PER_LINE = 1  # replacements tried per line, chosen with a fixed seed (set it to len(VALUES) for all)


def _mutations() -> list[tuple[str, int, str | None]]:
    chooser = random.Random(12)
    out: list[tuple[str, int, str | None]] = []
    for path in sorted(SPECS.glob("*.yaml")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            out.append((path.name, number, None))
            match = VALUE_LINE.match(line)
            if match:
                out += [(path.name, number, match.group(1) + v) for v in chooser.sample(VALUES, PER_LINE)]
    return out


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    pin_fixture_tree(cache, FIXTURES / "src")
    return cache


def test_the_project_is_valid(pinned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(pinned))
    specs = _copy(tmp_path)
    generation = generate(specs)
    assert len(generation.project.spans) == 5 and len(generation.project.hooks) == 7
    assert generation.warnings == ()


@pytest.mark.slow
def test_every_mutation_is_handled(pinned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(pinned))
    specs = _copy(tmp_path)
    mutations = _mutations()
    assert len(mutations) > 100
    generated = errors = 0
    for name, number, replacement in mutations:
        original = (SPECS / name).read_text(encoding="utf-8").splitlines()
        lines = (
            original[: number - 1] + ([replacement] if replacement is not None else []) + original[number:]
        )
        (specs / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        where = f"{name}:{number} -> {replacement!r}"
        try:
            generation = generate(specs)
        except SpecError as exc:
            errors += 1
            for item in exc.diagnostics.items:
                assert item.pos.path.endswith(".yaml") and item.pos.line >= 1, where
        else:
            generated += 1
            for path, (_, new) in generation.changes.items():
                if path.endswith(".py"):
                    compile(new, path, "exec")
        (specs / name).write_text("\n".join(original) + "\n", encoding="utf-8")
    assert generated and errors


def _copy(tmp_path: Path) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(FIXTURES / "telemetry.yaml", specs / "telemetry.yaml")
    for path in SPECS.glob("*.yaml"):
        shutil.copy(path, specs / path.name)
    return specs
