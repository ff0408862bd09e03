"""Fixtures for in-tree mode: a git repository made from the pinned megatron-core wheel's tree.

``upstream`` stands in for Megatron-LM: the pristine 0.19.2 ``megatron/`` package committed and
tagged ``core_v0.19.2`` (what the README's clone gets, redirected there with git's
``url.<base>.insteadOf``). Built once per test session; each module clones it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from codegen.diagnostics import Diagnostics
from codegen.spec.load import load_project
from codegen.target import locate_tree

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
TAG = "core_v0.19.2"
UPSTREAM_URL = "https://github.com/NVIDIA/Megatron-LM.git"
IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | IDENTITY
    result = subprocess.run(["git", *args], check=False, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="session")
def pristine_root() -> Path:
    """The pinned release's unpacked tree (the directory holding ``megatron/``)."""
    return locate_tree(load_project(SPECS, Diagnostics())).root


@pytest.fixture(scope="session")
def upstream(pristine_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream") / "Megatron-LM"
    shutil.copytree(pristine_root / "megatron", root / "megatron")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "megatron-core 0.19.2")
    git(root, "tag", TAG)
    return root


def clone(upstream: Path, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", str(upstream), dest.name)
    return dest
