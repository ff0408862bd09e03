"""Without the report-store extra (chdb) the file report works as before, and asking for chdb is
one clear error line (exit 3). chdb is hidden from a fresh interpreter (``sys.modules``), so this
runs whether or not the extra is installed."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO, SPECS
from tests.support.paths import REPORT_DATA as DATA

HIDE = "import sys; sys.modules['chdb'] = None; from codegen.cli import main; sys.exit(main(sys.argv[1:]))"


def _report(*argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", HIDE, "report", "--specs", str(SPECS), *argv]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)


def test_file_report_without_chdb(tmp_path):
    done = _report(str(DATA / "fresh.jsonl"), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "Goodput:" in done.stdout and (tmp_path / "out" / "report.html").exists()


def test_asking_for_chdb_without_it(tmp_path):
    for argv in (["--engine", "chdb", str(DATA / "fresh.jsonl")], ["--store", f"chdb:{tmp_path}"]):
        done = _report(*argv, "--out", str(tmp_path / "out"))
        assert done.returncode == 3, done.stderr
        assert (
            done.stderr == "error: chdb is not installed: pip install 'megatron-otel-codegen[report-store]'\n"
        )
        assert not (tmp_path / "out").exists()
