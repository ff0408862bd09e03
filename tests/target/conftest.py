"""Fixtures for tests against the real target: the pinned megatron-core release and specs/."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codegen.pipeline import Generation, generate
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
