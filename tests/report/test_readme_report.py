"""The README's "Where did the time go" command, run exactly as written, and its picture."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.report.conftest import DATA, REPO

SECTION = "## Where did the time go"
BLOCK = re.compile(r"^<!-- readme: report -->\n```sh\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


def _section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end]


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
    for target in re.findall(r"\]\(((?:docs|generated)/[^)]+)\)", section):
        assert (REPO / target).is_file(), target
    assert "docs/images/report-page.png" in section
