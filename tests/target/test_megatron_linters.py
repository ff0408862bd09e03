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

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from codegen.pipeline import Generation
from tests.support.megatron_linters import (
    black_format,
    flake8_findings,
    isort_format,
    new_formatter_findings,
    pylint_docstrings,
    write_tree,
)

black = pytest.importorskip("black", reason="black is in the test extra (tox -e test)")
isort = pytest.importorskip("isort", reason="isort is in the test extra (tox -e test)")


def _black_findings(item: tuple[str, str | None, str]) -> tuple[str, list[str]]:
    path, old, new = item
    return path, new_formatter_findings(old, new, black_format)


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
        if (lines := new_formatter_findings(old, new, isort_format))
    }
    assert findings == {}, "isort (Megatron's profile) would change:\n" + _report(findings)


def test_formatter_check_catches_a_new_finding() -> None:
    """The comparison itself: a pre-existing violation is not ours, an added one is."""
    old = "x = [1,2]\n\n\ndef f():\n    return 1\n"
    new = "x = [1,2]\n\n\ndef f():\n    y = {'a':1}\n    return 1\n"
    assert new_formatter_findings(old, old, black_format) == []
    assert new_formatter_findings(old, new, black_format) == ["5: \"    y = {'a':1}\""]
    assert new_formatter_findings(None, "import b\nimport a\n", isort_format) == [
        "1: 'import b'",
        "2: 'import a'",
    ]


def test_flake8_adds_no_finding(generation: Generation, tmp_path: Path) -> None:
    pytest.importorskip("flake8", reason="flake8 is in the test extra (tox -e test)")
    old = {path: text for path, (text, _) in generation.changes.items() if text is not None}
    new = {path: text for path, (_, text) in generation.changes.items()}
    before = flake8_findings(tmp_path / "pristine", write_tree(tmp_path / "pristine", old))
    after = flake8_findings(tmp_path / "patched", write_tree(tmp_path / "patched", new))
    added = after - before
    assert not added, "new flake8 findings:\n" + "\n".join(f"{p}: {m}" for p, m in sorted(added))
    # the check is live: the pristine release has findings of its own
    assert sum(before.values()) > 0


def test_runtime_package_has_every_docstring(generation: Generation, tmp_path: Path) -> None:
    pytest.importorskip("pylint", reason="pylint is in the test extra (tox -e test)")
    package = generation.project.runtime.package + "/"
    runtime = {
        p: new for p, (old, new) in generation.changes.items() if old is None and p.startswith(package)
    }
    assert runtime
    findings = pylint_docstrings(tmp_path, write_tree(tmp_path, runtime))
    assert findings == [], "\n".join(findings)


def test_pylint_docstring_check_is_live(tmp_path: Path) -> None:
    pytest.importorskip("pylint", reason="pylint is in the test extra (tox -e test)")
    files = write_tree(tmp_path, {"pkg/mod.py": '"""Doc."""\n\n\ndef f():\n    return 1\n'})
    assert [f.split(": ", 1)[1][:5] for f in pylint_docstrings(tmp_path, files)] == ["C0116"]
