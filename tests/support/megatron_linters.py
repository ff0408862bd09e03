"""Megatron-LM's own linters as its ``linting`` group runs them (black, isort, flake8, pylint's
docstring checks), and the comparison that tells a finding a patch added from one the pristine
file already had (tests/target/test_megatron_linters.py, tests/inplace/test_readme_in_place.py)."""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# Megatron-LM's pyproject.toml [tool.black] / [tool.isort] and .flake8, as its linting group runs them.
BLACK_MODE = dict(line_length=100, string_normalization=False)
ISORT_SETTINGS = dict(
    profile="black",
    line_length=100,
    py_version="310",
    known_first_party=["megatron"],
    known_third_party=["transformer_engine"],
    sections=["FUTURE", "STDLIB", "THIRDPARTY", "FIRSTPARTY", "LOCALFOLDER"],
    default_section="THIRDPARTY",
)
FLAKE8_ARGS = ["--max-line-length=100", "--extend-ignore=E203", "--per-file-ignores=__init__.py:F401"]
PYLINT_DOCSTRINGS = ["--disable=all", "--enable=C0114,C0115,C0116", "--score=n", "--persistent=n"]


def lines_changed_by(text: str, formatter: Callable[[str], str]) -> set[int]:
    """0-based lines of ``text`` the formatter rewrites (a pure insertion counts on the next line)."""
    before, after = text.splitlines(), formatter(text).splitlines()
    changed: set[int] = set()
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag != "equal":
            changed.update(range(i1, max(i2, i1 + 1)))
    return changed


def kept_lines(old: str, new: str) -> dict[int, int]:
    """Line of ``new`` -> the same line of ``old``, for lines the patch left untouched."""
    kept: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            kept.update({j1 + k: i1 + k for k in range(i2 - i1)})
    return kept


def new_formatter_findings(old: str | None, new: str, formatter: Callable[[str], str]) -> list[str]:
    """Lines of ``new`` the formatter would change that it would not have changed in ``old``."""
    found = lines_changed_by(new, formatter)
    if not found:
        return []
    before = lines_changed_by(old, formatter) if old is not None else set()
    kept = kept_lines(old or "", new)
    lines = new.splitlines() + [""]
    return [f"{n + 1}: {lines[n]!r}" for n in sorted(found) if kept.get(n) not in before]


def black_format(text: str) -> str:
    import black

    return black.format_str(text, mode=black.Mode(**BLACK_MODE))


def isort_format(text: str) -> str:
    import isort

    return isort.code(text, **ISORT_SETTINGS)


def write_tree(root: Path, files: dict[str, str]) -> list[str]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return sorted(files)


_LOCATION = re.compile(r"^(?P<path>[^:]+):\d+:\d+: (?P<message>.*)$")


def flake8_findings(root: Path, files: list[str]) -> Counter[tuple[str, str]]:
    """(path, 'CODE message') of every flake8 finding, counted; line numbers left out."""
    if not files:
        return Counter()
    result = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", *FLAKE8_ARGS, *files],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert result.returncode in (0, 1), result.stderr
    found: Counter[tuple[str, str]] = Counter()
    for line in result.stdout.splitlines():
        match = _LOCATION.match(line)
        assert match, line
        # "redefinition of unused 'x' from line 33": the line moves when lines are added above
        found[(match["path"], re.sub(r"\bline \d+", "line N", match["message"]))] += 1
    return found


def pylint_docstrings(root: Path, files: list[str]) -> list[str]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pylint",
            *PYLINT_DOCSTRINGS,
            "--msg-template={path}:{line}: {msg_id} {msg}",
            *files,
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert result.returncode & 32 == 0, result.stderr  # 32: pylint's usage error
    return [line for line in result.stdout.splitlines() if re.match(r"^\S+:\d+: C011[456] ", line)]
