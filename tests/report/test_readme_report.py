"""The user guide's "Where did the time go" command (docs/guide/report.md), run exactly as written, and its picture."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.doc_blocks import README, blocks
from tests.support.git_repo import git
from tests.support.paths import REPO

BLOCK = re.compile(r"^<!-- readme: report -->\n```sh\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
PAGE = REPO / "docs" / "guide" / "report.md"


def _section() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_readme_command_runs_as_written(tmp_path):
    """From a clone as written: every capture it names is a file the repository tracks (the old
    example named run/capture.jsonl, which no clone has: exit 3); run in a directory holding only
    those files and the environment's console script."""
    (command,) = [m["body"] for m in BLOCK.finditer(_section())]
    tracked = set(git(REPO, "ls-files").split())
    captures = [word for word in shlex.split(command) if word.endswith((".json", ".jsonl"))]
    assert captures and all(c in tracked for c in captures), captures
    for capture in captures:
        (tmp_path / capture).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / capture, tmp_path / capture)
    script = shutil.which("codegen", path=str(Path(sys.executable).parent)) or shutil.which("codegen")
    assert script, "the codegen console script is not installed"
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "codegen").symlink_to(script)
    result = subprocess.run(
        ["bash", "-e", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "Goodput:" in result.stdout and "Where the time went" in result.stdout
    assert "run 1: " in result.stdout and "resumed from iteration 4" in result.stdout  # both runs read
    for name in ("report.txt", "report.html", "trace.perfetto.json"):
        assert (tmp_path / "report" / name).is_file(), name
    assert blocks(README)["report"] == command  # the README shows the same command
    # run from the clone, what it writes is ignored by git (not shown as untracked), and only that
    written = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "report").rglob("*") if p.is_file())
    ignored = subprocess.run(["git", "check-ignore", *written], cwd=REPO, capture_output=True, text=True)
    assert ignored.stdout.split() == written, ignored.stdout
    for kept in ("codegen/report/store.py", "tests/data/report/fresh.jsonl"):
        assert subprocess.run(["git", "check-ignore", "-q", kept], cwd=REPO).returncode == 1, kept


def test_readme_picture_and_docs_link_exist():
    section = _section()
    links = re.findall(r"\]\((\.\./[^)#]+)", section)
    for target in links:
        # the site's taxonomy pages are a copy of generated/docs/ (docs/conf.py)
        path = (PAGE.parent / target).resolve()
        if path.parent.name == "taxonomy":
            path = REPO / "generated" / "docs" / path.name
        assert path.is_file(), target
    assert "../images/report-page.png" in links
