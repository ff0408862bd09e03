"""Fixtures for tests against the real target: the pinned megatron-core release and specs/."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from codegen.diagnostics import Diagnostics
from codegen.pipeline import Generation, generate
from codegen.spec.load import load_project
from codegen.upstream import source_root
from tests.support.instrumentation_wheel import MODULE, RELEASES, build_wheel, load_finder, unpack
from tests.support.paths import SPECS


@pytest.fixture(scope="session")
def generation() -> Generation:
    return generate(SPECS)


@pytest.fixture(scope="session")
def patched_tree(generation: Generation, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh copy of the pristine release with generated/patches applied by ``git apply``."""
    root = tmp_path_factory.mktemp("patched")
    shutil.copytree(generation.source_root / "megatron", root / "megatron")
    return root


# -- the instrumentation wheel (codegen package): tests/target/test_package.py, test_main_package.py


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack(wheel, tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def finder_module(unpacked: Path) -> Any:
    """The wheel's ``_finder`` module, loaded from the unpacked wheel."""
    return load_finder(unpacked, f"{MODULE}._finder")


@pytest.fixture(scope="module")
def trees() -> dict[str, Path]:
    project = load_project(SPECS, Diagnostics())
    pins = {pin.version: pin for pin in project.releases()}
    assert tuple(pins) == RELEASES
    return {version: source_root(pin) for version, pin in pins.items()}
