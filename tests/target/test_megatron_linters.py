"""Megatron's own linters on the patch set: it adds no finding over the pristine release.

Megatron-LM formats with black (line length 100, no string normalization) and isort (its
pyproject's profile), lints with flake8 (its .flake8) and checks docstrings with pylint (its
.pylintrc enables C0115/C0116; C0114 is checked too). The tool versions are Megatron's own
``linting`` dependency group, pinned in constraints.txt.

Each tool runs on the pristine file and the patched file. A finding is new when it is on a line
the patch added, or on an untouched line where the pristine file had none; pre-existing findings
of the untouched code (Megatron's files are not all black-clean) are not ours.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from codegen.pipeline import Generation

black = pytest.importorskip("black", reason="black is in the test extra (tox -e test)")
isort = pytest.importorskip("isort", reason="isort is in the test extra (tox -e test)")

# Megatron-LM's pyproject.toml [tool.black] / [tool.isort] and .flake8, as its linting group runs them.
BLACK_MODE = black.Mode(line_length=100, string_normalization=False)
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


def _lines_changed_by(text: str, formatter: Callable[[str], str]) -> set[int]:
    """0-based lines of ``text`` the formatter rewrites (a pure insertion counts on the next line)."""
    before, after = text.splitlines(), formatter(text).splitlines()
    changed: set[int] = set()
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag != "equal":
            changed.update(range(i1, max(i2, i1 + 1)))
    return changed


def _kept_lines(old: str, new: str) -> dict[int, int]:
    """Line of ``new`` -> the same line of ``old``, for lines the patch left untouched."""
    kept: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            kept.update({j1 + k: i1 + k for k in range(i2 - i1)})
    return kept


def _new_formatter_findings(old: str | None, new: str, formatter: Callable[[str], str]) -> list[str]:
    """Lines of ``new`` the formatter would change that it would not have changed in ``old``."""
    found = _lines_changed_by(new, formatter)
    if not found:
        return []
    before = _lines_changed_by(old, formatter) if old is not None else set()
    kept = _kept_lines(old or "", new)
    lines = new.splitlines() + [""]
    return [f"{n + 1}: {lines[n]!r}" for n in sorted(found) if kept.get(n) not in before]


def _black(text: str) -> str:
    return black.format_str(text, mode=BLACK_MODE)


def _isort(text: str) -> str:
    return isort.code(text, **ISORT_SETTINGS)


def _black_findings(item: tuple[str, str | None, str]) -> tuple[str, list[str]]:
    path, old, new = item
    return path, _new_formatter_findings(old, new, _black)


def _report(findings: dict[str, list[str]]) -> str:
    return "\n".join(f"{path}:{line}" for path, lines in findings.items() for line in lines)


def test_black_adds_no_finding(generation: Generation) -> None:
    items = [(path, old, new) for path, (old, new) in generation.changes.items()]
    workers = min(len(items), os.cpu_count() or 1)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        findings = {path: lines for path, lines in pool.map(_black_findings, items) if lines}
    assert findings == {}, "black -l 100 -S would change:\n" + _report(findings)


def test_isort_adds_no_finding(generation: Generation) -> None:
    findings = {
        path: lines
        for path, (old, new) in generation.changes.items()
        if (lines := _new_formatter_findings(old, new, _isort))
    }
    assert findings == {}, "isort (Megatron's profile) would change:\n" + _report(findings)


def test_formatter_check_catches_a_new_finding() -> None:
    """The comparison itself: a pre-existing violation is not ours, an added one is."""
    old = "x = [1,2]\n\n\ndef f():\n    return 1\n"
    new = "x = [1,2]\n\n\ndef f():\n    y = {'a':1}\n    return 1\n"
    assert _new_formatter_findings(old, old, _black) == []
    assert _new_formatter_findings(old, new, _black) == ["5: \"    y = {'a':1}\""]
    assert _new_formatter_findings(None, "import b\nimport a\n", _isort) == ["1: 'import b'", "2: 'import a'"]


def _write_tree(root: Path, files: dict[str, str]) -> list[str]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return sorted(files)


_LOCATION = re.compile(r"^(?P<path>[^:]+):\d+:\d+: (?P<message>.*)$")


def _flake8(root: Path, files: list[str]) -> Counter[tuple[str, str]]:
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


def test_flake8_adds_no_finding(generation: Generation, tmp_path: Path) -> None:
    pytest.importorskip("flake8", reason="flake8 is in the test extra (tox -e test)")
    old = {path: text for path, (text, _) in generation.changes.items() if text is not None}
    new = {path: text for path, (_, text) in generation.changes.items()}
    before = _flake8(tmp_path / "pristine", _write_tree(tmp_path / "pristine", old))
    after = _flake8(tmp_path / "patched", _write_tree(tmp_path / "patched", new))
    added = after - before
    assert not added, "new flake8 findings:\n" + "\n".join(f"{p}: {m}" for p, m in sorted(added))
    # the check is live: the pristine release has findings of its own
    assert sum(before.values()) > 0


def _pylint_docstrings(root: Path, files: list[str]) -> list[str]:
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


def test_runtime_package_has_every_docstring(generation: Generation, tmp_path: Path) -> None:
    pytest.importorskip("pylint", reason="pylint is in the test extra (tox -e test)")
    package = generation.project.runtime.package + "/"
    runtime = {
        p: new for p, (old, new) in generation.changes.items() if old is None and p.startswith(package)
    }
    assert runtime
    findings = _pylint_docstrings(tmp_path, _write_tree(tmp_path, runtime))
    assert findings == [], "\n".join(findings)


def test_pylint_docstring_check_is_live(tmp_path: Path) -> None:
    pytest.importorskip("pylint", reason="pylint is in the test extra (tox -e test)")
    files = _write_tree(tmp_path, {"pkg/mod.py": '"""Doc."""\n\n\ndef f():\n    return 1\n'})
    assert [f.split(": ", 1)[1][:5] for f in _pylint_docstrings(tmp_path, files)] == ["C0116"]
