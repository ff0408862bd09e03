"""Output trees compared: what is on disk against what would be generated (written by
``codegen.atomic.write_tree``, re-exported here for the benchmarks that write forks)."""

from __future__ import annotations

import difflib
from pathlib import Path

from codegen.atomic import write_tree

__all__ = ["diff_trees", "read_tree", "write_tree"]


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
