"""Fixtures for in-tree mode: a git repository made from the pinned megatron-core wheel's tree.

``upstream`` stands in for Megatron-LM: the pristine 0.19.2 ``megatron/`` package committed and
tagged ``core_v0.19.2`` (what the README's clone gets, redirected there with git's
``url.<base>.insteadOf``). Built once per test session; each module clones it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.diagnostics import Diagnostics
from codegen.spec.load import load_project
from codegen.target import locate_tree
from tests.support.git_repo import tagged_repository
from tests.support.paths import SPECS

TAG = "core_v0.19.2"
UPSTREAM_URL = "https://github.com/NVIDIA/Megatron-LM.git"


@pytest.fixture(scope="session")
def pristine_root() -> Path:
    """The pinned release's unpacked tree (the directory holding ``megatron/``)."""
    return locate_tree(load_project(SPECS, Diagnostics())).root


@pytest.fixture(scope="session")
def upstream(pristine_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tagged_repository(pristine_root, tmp_path_factory.mktemp("upstream") / "Megatron-LM", TAG)
