"""Runtime overhead and generator speed, reported as same-run ratios (not part of the tests)."""

from __future__ import annotations

from pathlib import Path


def print_table(lines: list[str], out: Path | None) -> None:
    """A profile's table to stdout, and to ``out`` (its ``--out FILE``) when given."""
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
