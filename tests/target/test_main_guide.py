"""docs/guide/megatron-lm-main.md, as a user follows it: its command blocks run exactly as written,
in a git checkout of Megatron-LM main carrying #6438 (the snapshot), beside this repository laid
out as the page expects (``tests/support/doc_blocks.workspace``). The change is one reviewable commit;
running the command again changes nothing; ``--check`` passes; and the per-file size of the change
against the same commit without #6438 (``git diff --numstat``) is what the page's table says.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from codegen.spec.load import load_project
from tests.support.doc_blocks import GUIDE, blocks, run_block, workspace
from tests.support.git_repo import IDENTITY, git
from tests.support.paths import REPO
from tests.support.upstream_main import snapshot

PAGE = GUIDE / "megatron-lm-main.md"
TABLE = re.compile(r"<!-- numstat -->\n(?P<table>.*?)<!-- /numstat -->", re.DOTALL)
# What the comparison counts: code under megatron/ and the entry scripts (#6438's own docs pages
# and pyproject.toml pins are left out of both sides, as in #6438's 1,608 added lines).
LEFT_OUT = re.compile(r"(docs/|pyproject\.toml$)")
ENV = {**os.environ, **IDENTITY}  # the page's blocks commit


def _run(name: str, cwd: Path) -> str:
    return run_block(name, cwd, ENV, timeout=900, page=PAGE)


def _checkout(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "upstream")
    return dest


def _numstat(base: Path, other: Path, ref: str) -> list[tuple[int, int, str]]:
    git(base, "fetch", "-q", str(other), ref)
    rows = []
    for line in git(base, "diff", "--numstat", "--no-renames", "HEAD", "FETCH_HEAD").splitlines():
        added, removed, path = line.split("\t")
        if not LEFT_OUT.match(path):
            rows.append((int(added), int(removed), path))
    return rows


def _table(ours: list[tuple[int, int, str]], theirs: list[tuple[int, int, str]], runtime: str) -> str:
    lines = ["| file | added | removed |", "|---|---:|---:|"]
    lines += [f"| `{path}` | {a} | {r} |" for a, r, path in ours]
    sites = [(a, r) for a, r, path in ours if not path.startswith(runtime + "/")]
    package = [(a, r) for a, r, path in ours if path.startswith(runtime + "/")]
    for label, rows in (
        (f"**call sites** (outside `{runtime}/`)", sites),
        (f"**runtime package** (`{runtime}/`)", package),
        ("**in all**", sites + package),
        ("#6438, for comparison (the same count)", [(a, r) for a, r, _ in theirs]),
    ):
        lines.append(f"| {label} | {sum(a for a, _ in rows)} | {sum(r for _, r in rows)} |")
    return "\n".join(lines) + "\n"


def test_the_pages_commands_replace_6438_in_a_checkout(tmp_path: Path) -> None:
    with_6438, minus = snapshot("with"), snapshot("minus")
    root = workspace(tmp_path / "work")
    checkout = _checkout(with_6438, root / "Megatron-LM")
    named = blocks(PAGE)
    assert list(named) == ["main-branch", "main-replace", "main-review", "main-commit", "main-check"]

    _run("main-branch", root)
    # without --replace-upstream the run is refused (exit 3) and names the command that adds it:
    # the guide's own (the same words); run as printed, it replaces #6438 (the guide's block runs
    # as written below, and finds nothing left to do)
    command = named["main-replace"].replace("\\\n", " ")
    cd, apply = command.splitlines()
    assert cd == "cd Megatron-LM" and " --replace-upstream" in apply
    refused = subprocess.run(
        ["bash", "-c", apply.replace(" --replace-upstream", "")],
        cwd=checkout,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert refused.returncode == 3, refused.stdout + refused.stderr
    (hint,) = re.findall(r"^    to replace it: run '([^']+)'$", refused.stderr, re.MULTILINE)
    assert sorted(shlex.split(hint)[1:]) == sorted(shlex.split(apply)[1:]), hint
    assert git(checkout, "status", "--porcelain") == "", "the refusal wrote nothing"
    done = subprocess.run(
        ["bash", "-c", hint], cwd=checkout, env=ENV, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout + done.stderr
    updated = re.search(r"updated (\d+) files in \.:", out)
    assert updated, out
    # one count: the run says how many of the files it updated carry generated code, out of how
    # many, and --check later gives that same total (it said 14 where the run said "updated 18")
    split = re.search(
        r"^of these, (\d+) of the (\d+) files generated or instrumented(?:; (\d+) other)?", out, re.MULTILINE
    )
    assert split, out
    assert int(split[1]) + int(split[3] or 0) == int(updated[1]), out
    review = _run("main-review", root)
    assert "megatron/training/training.py" in review
    _run("main-commit", root)
    assert git(checkout, "rev-list", "--count", "HEAD").strip() == "2", "one commit on top of upstream"
    assert git(checkout, "rev-parse", "--abbrev-ref", "HEAD").strip() != "main", "on a branch of its own"
    assert git(checkout, "status", "--porcelain") == "", "the commit holds the whole change"

    again = _run("main-replace", root)  # the same command again
    assert "nothing to write" in again, again
    assert git(checkout, "status", "--porcelain") == ""
    checked = _run("main-check", root)
    assert re.search(
        rf"is up to date with \S+ \({split[2]} files generated or instrumented\)$", checked, re.MULTILINE
    ), checked

    runtime = load_project(REPO / "specs").runtime.package.strip("/")
    reverted = _checkout(minus, tmp_path / "reverted")
    ours = _numstat(reverted, checkout, "HEAD")
    theirs = _numstat(reverted, _checkout(with_6438, tmp_path / "with"), "HEAD")
    table = _table(ours, theirs, runtime)
    print("\n" + table)
    found = TABLE.search(PAGE.read_text(encoding="utf-8"))
    assert found, f"{PAGE}: no <!-- numstat --> table"
    assert found["table"] == table, f"{PAGE}: the numstat table is stale; it is now:\n{table}"
    assert sum(a for a, _, _ in theirs) == 1608, "#6438's own figure, measured the same way"


@pytest.fixture(autouse=True)
def _git_installed() -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the page's commands need it")
