"""The user guide's "Where did the time go" command (docs/guide/report.md), run exactly as written, and its picture."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.report.conftest import DATA, REPO

BLOCK = re.compile(r"^<!-- readme: report -->\n```sh\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
PAGE = REPO / "docs" / "guide" / "report.md"


def _section() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_readme_command_runs_as_written(tmp_path):
    (command,) = [m["body"] for m in BLOCK.finditer(_section())]
    script = shutil.which("codegen", path=str(Path(sys.executable).parent)) or shutil.which("codegen")
    assert script, "the codegen console script is not installed"
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "codegen").symlink_to(script)
    (tmp_path / "run").mkdir()
    shutil.copy2(DATA / "fresh.jsonl", tmp_path / "run" / "capture.jsonl")
    result = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "Goodput:" in result.stdout and "Where the time went" in result.stdout
    for name in ("report.txt", "report.html", "trace.perfetto.json"):
        assert (tmp_path / "report" / name).is_file(), name


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
