"""Atomic writes of whole output directories: on any error the destination is left as it was."""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from pathlib import Path


def read_tree(root: Path) -> dict[str, str]:
    if not root.is_dir():
        return {}
    return {
        # surrogateescape: a file that is not UTF-8 still compares (as different), never crashes
        p.relative_to(root).as_posix(): p.read_bytes().decode("utf-8", "surrogateescape")
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def diff_trees(label: str, old: dict[str, str], new: dict[str, str]) -> str:
    """A unified diff from what is on disk to what would be generated; "" when identical."""
    chunks: list[str] = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        chunks.extend(
            difflib.unified_diff(
                (before or "").splitlines(keepends=True),
                (after or "").splitlines(keepends=True),
                f"{label}/{name}" if before is not None else "/dev/null",
                f"{label}/{name} (generated)" if after is not None else "/dev/null",
            )
        )
        if chunks and not chunks[-1].endswith("\n"):
            chunks[-1] += "\n"
    return "".join(chunks)


def _swap_into_place(staging: Path, dest: Path) -> None:
    backup = None
    if dest.exists():
        backup = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.rmdir(backup)
        os.rename(dest, backup)
    try:
        os.rename(staging, dest)
    except BaseException:
        if backup is not None:
            os.rename(backup, dest)
        raise
    if backup is not None:
        shutil.rmtree(backup)


def write_tree(dest: Path, files: dict[str, str], base: Path | None = None) -> None:
    """Replace ``dest`` by ``base`` (copied, if given) overlaid with ``files``, atomically."""
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new-", dir=dest.parent))
    try:
        if base is not None:
            os.rmdir(staging)
            # a Megatron-LM checkout's history is not part of the fork
            shutil.copytree(base, staging, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        for name, text in files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="")
        _swap_into_place(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
