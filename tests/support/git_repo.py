"""git for the tests: commands run with a fixed identity and none of the caller's ``GIT_*``
settings, clones, and a copy of this checkout's files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.paths import REPO

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


def clone(upstream: Path, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", str(upstream), dest.name)
    return dest


def tagged_repository(tree: Path, dest: Path, tag: str) -> Path:
    """A stand-in for Megatron-LM at ``dest``: ``tree``'s ``megatron/`` package committed on
    ``main`` and tagged ``tag``; ``dest``."""
    shutil.copytree(tree / "megatron", dest / "megatron")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "the pristine release")
    git(dest, "tag", tag)
    return dest


def copy_checkout(dest: Path) -> Path:
    """The files of this checkout git would commit (tracked, and new ones it does not ignore), as
    they are in the working tree, copied under ``dest``; ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest
