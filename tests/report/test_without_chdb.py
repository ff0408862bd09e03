"""Without the report-store extra (chdb) the file report works as before, and asking for chdb is
one clear error line (exit 3) whose install command works from where codegen was installed. chdb
is hidden from a fresh interpreter (``sys.modules``), so this runs whether or not the extra is
installed; the install command is run (``pip --dry-run``) in fresh virtual environments that
install codegen from a clone (editable or not) and from a wheel built from it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.support.git_repo import copy_checkout
from tests.support.paths import REPO, SPECS
from tests.support.paths import REPORT_DATA as DATA

PREFIX = "error: chdb is not installed (the report-store extra): "

HIDE = "import sys; sys.modules['chdb'] = None; from codegen.cli import main; sys.exit(main(sys.argv[1:]))"


def _report(*argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", HIDE, "report", "--specs", str(SPECS), *argv]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)


def test_file_report_without_chdb(tmp_path):
    done = _report(str(DATA / "fresh.jsonl"), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "Goodput:" in done.stdout and (tmp_path / "out" / "report.html").exists()


def test_asking_for_chdb_without_it(tmp_path):
    for argv in (
        ["--engine", "chdb", str(DATA / "fresh.jsonl")],
        ["--save-store", str(tmp_path / "store"), str(DATA / "fresh.jsonl")],
        ["--store", f"chdb:{tmp_path}"],
    ):
        done = _report(*argv, "--out", str(tmp_path / "out"))
        assert done.returncode == 3, done.stderr
        assert done.stderr.startswith(PREFIX) and done.stderr.count("\n") == 1, done.stderr
        # pip install of the extra as a distribution name: no index serves megatron-otel-codegen
        assert "megatron-otel-codegen[" not in done.stderr and " -m pip install " in done.stderr
        assert not (tmp_path / "out").exists() and not (tmp_path / "store").exists()


def _outside(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``command`` run without this environment's PYTHONPATH and VIRTUAL_ENV, its output kept."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)


@pytest.mark.parametrize("how", ["editable clone", "clone", "wheel"])
def test_the_install_command_works_where_codegen_was_installed(tmp_path, how):
    """codegen installed into a fresh venv from a clone (pip install -e CLONE, pip install CLONE)
    or from the wheel built from it: the error's command, run as printed (with --dry-run), resolves
    chdb into that venv, held to the clone's constraints.txt when there is a clone."""
    clone = copy_checkout(tmp_path / "megatron-otel-codegen")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "-c", str(clone / "constraints.txt")]
    if how == "wheel":
        built = _outside(
            [str(python), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(clone)]
        )
        assert built.returncode == 0, built.stderr[-3000:]
        (wheel,) = (tmp_path / "dist").glob("*.whl")
        target = [str(wheel)]
    else:
        target = ["-e", str(clone)] if how == "editable clone" else [str(clone)]
    installed = _outside([*pip, *target])
    assert installed.returncode == 0, installed.stderr[-3000:]
    if how == "wheel":
        shutil.rmtree(clone)  # nothing of a clone to point at
    work = tmp_path / "work"
    work.mkdir()
    capture = shutil.copy2(DATA / "fresh.jsonl", work / "capture.jsonl")
    codegen = str(env_dir / "bin" / "codegen")
    done = _outside([codegen, "report", "--specs", str(SPECS), str(capture), "--engine", "chdb"], work)
    assert done.returncode == 3 and done.stderr.startswith(PREFIX), done.stderr
    command = done.stderr[len(PREFIX) :].strip()
    words = shlex.split(command)
    assert words[:4] == [str(python), "-m", "pip", "install"], command
    constrained = ["-c", str(clone / "constraints.txt")]
    assert (words[4:6] == constrained) == (how != "wheel"), command
    tried = _outside(["bash", "-c", f"{command} --dry-run"], work)
    assert tried.returncode == 0, tried.stdout[-3000:] + tried.stderr[-3000:]
    assert "Would install" in tried.stdout and "chdb-4." in tried.stdout, tried.stdout
    if how != "wheel":  # the clone's pin
        pinned = [
            line for line in (clone / "constraints.txt").read_text().splitlines() if line.startswith("chdb==")
        ]
        assert f"chdb-{pinned[0].split('==')[1]}" in tried.stdout.split(), tried.stdout
