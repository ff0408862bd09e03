"""make_patch output must apply exactly with ``git apply`` and GNU ``patch -p1`` and match git's hunks."""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from codegen.atomic import write_files
from codegen.emit.patch import _HeadTailMatcher, make_patch, split_lines, write_patch_set
from tests.support.git_repo import IDENTITY

PATH = "megatron/core/mod.py"


def _numbered(count: int, start: int = 1, eol: str = "\n") -> str:
    return "".join(f"line {i}{eol}" for i in range(start, start + count))


def _change(text: str, *numbers: int) -> str:
    """``text`` with each line ``number`` (from 1) made ``changed NUMBER``, its line ending kept."""
    lines = split_lines(text)
    for number in numbers:
        lines[number - 1] = f"changed {number}" + lines[number - 1].removeprefix(f"line {number}")
    return "".join(lines)


BASE = _numbered(20)
LONG = _numbered(40)

CODE_OLD = """\
import torch


class Block(torch.nn.Module):
    def forward(self, x):
        y = self.norm(x)
        y = self.attn(y)
        return x + y


def helper():
    return 1
"""
CODE_NEW = """\
import torch

from megatron_otel import tracer


class Block(torch.nn.Module):
    def forward(self, x):
        with tracer.start_as_current_span("block.forward"):
            y = self.norm(x)
            y = self.attn(y)
            return x + y


def helper():
    return 1
"""


@dataclass(frozen=True)
class Case:
    name: str
    old: str | None
    new: str | None
    hunk_headers: tuple[str, ...]
    git_identical: bool = True


CASES = [
    Case("middle", BASE, _change(BASE, 10), ("@@ -7,7 +7,7 @@",)),
    Case("start", BASE, _change(BASE, 1), ("@@ -1,4 +1,4 @@",)),
    Case("end", BASE, _change(BASE, 20), ("@@ -17,4 +17,4 @@",)),
    Case("insert_middle", BASE, BASE.replace("line 5\n", "line 5\nnew a\nnew b\n"), ("@@ -3,6 +3,8 @@",)),
    Case("delete_middle", BASE, BASE.replace("line 5\nline 6\n", ""), ("@@ -2,8 +2,6 @@",)),
    Case("insert_at_start", BASE, "first\n" + BASE, ("@@ -1,3 +1,4 @@",)),
    Case("single_line_file", "a\n", "b\n", ("@@ -1 +1 @@",)),
    Case("single_line_grows", "a\n", "a\nb\n", ("@@ -1 +1,2 @@",)),
    Case("new_file", None, "a\nb\nc\n", ("@@ -0,0 +1,3 @@",)),
    Case("new_file_single_line", None, "only\n", ("@@ -0,0 +1 @@",)),
    Case("new_file_no_eol", None, "a\nb", ("@@ -0,0 +1,2 @@",)),
    Case("new_empty_file", None, "", ()),
    Case("deleted_file", BASE, None, ("@@ -1,20 +0,0 @@",)),
    Case("deleted_file_no_eol", "a\nb", None, ("@@ -1,2 +0,0 @@",)),
    Case("deleted_empty_file", "", None, ()),
    Case("no_eol_old", BASE + "tail", BASE + "tail\nmore\n", ("@@ -18,4 +18,5 @@",)),
    Case("no_eol_new", BASE + "tail\n", BASE + "changed", ("@@ -18,4 +18,4 @@",)),
    Case("no_eol_both", BASE + "tail", BASE + "changed", ("@@ -18,4 +18,4 @@",)),
    Case("no_eol_both_context_only", BASE + "tail", _change(BASE, 19) + "tail", ("@@ -16,6 +16,6 @@",)),
    Case("add_trailing_newline", BASE + "tail", BASE + "tail\n", ("@@ -18,4 +18,4 @@",)),
    Case("remove_trailing_newline", BASE + "tail\n", BASE + "tail", ("@@ -18,4 +18,4 @@",)),
    Case("crlf", _numbered(12, eol="\r\n"), _change(_numbered(12, eol="\r\n"), 6), ("@@ -3,7 +3,7 @@",)),
    Case("lf_to_crlf", _numbered(3), _numbered(3, eol="\r\n"), ("@@ -1,3 +1,3 @@",)),
    Case("crlf_no_eol", "a\r\nb\r\nc", "a\r\nB\r\nc", ("@@ -1,3 +1,3 @@",)),
    Case(
        "form_feed_and_lone_cr_stay_in_line",
        "a\n\x0c\nb\x0cc\nd\re\nf\n",
        "a\n\x0c\nb\x0cC\nd\re\nf\n",
        ("@@ -1,5 +1,5 @@",),
    ),
    Case("two_distant_changes", LONG, _change(LONG, 5, 30), ("@@ -2,7 +2,7 @@", "@@ -27,7 +27,7 @@")),
    Case("two_close_changes", LONG, _change(LONG, 10, 15), ("@@ -7,12 +7,12 @@",)),
    # Exactly 2*context unchanged lines between changes: git still merges.
    Case("gap_of_six_merges", LONG, _change(LONG, 10, 17), ("@@ -7,14 +7,14 @@",)),
    # One more unchanged line: git splits into two hunks.
    Case("gap_of_seven_splits", LONG, _change(LONG, 10, 18), ("@@ -7,7 +7,7 @@", "@@ -15,7 +15,7 @@")),
    Case("empty_old_file", "", "a\nb\n", ("@@ -0,0 +1,2 @@",)),
    Case("emptied_file", "a\nb\n", "", ("@@ -1,2 +0,0 @@",)),
    # git's indent heuristic places the inserted blank line differently; both apply.
    Case("python_code", CODE_OLD, CODE_NEW, ("@@ -1,11 +1,14 @@",), git_identical=False),
]

_GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    **IDENTITY,
    "LC_ALL": "C",
}


@dataclass(frozen=True)
class _Output:
    stdout: str
    stderr: str


def _run(args: list[str], cwd: Path) -> _Output:
    tool = shutil.which(args[0])
    assert tool is not None, f"{args[0]} is required for these tests (e.g. apt-get install -y {args[0]})"
    # Bytes, not text=True: universal-newline decoding would hide CRs in git's output.
    result = subprocess.run(args, cwd=cwd, env=_GIT_ENV, capture_output=True, check=False)
    output = _Output(result.stdout.decode(), result.stderr.decode())
    command = " ".join(args)
    assert result.returncode == 0, f"{command} failed ({result.returncode}):\n{output.stdout}{output.stderr}"
    return output


def _write_tree(root: Path, content: str | None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    if content is not None:
        target = root / PATH
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode())


def _read_tree(root: Path) -> bytes | None:
    target = root / PATH
    return target.read_bytes() if target.exists() else None


def _expected(case: Case) -> bytes | None:
    return None if case.new is None else case.new.encode()


def _write_patch(tmp_path: Path, text: str) -> Path:
    patch_file = tmp_path / "change.patch"
    patch_file.write_bytes(text.encode())
    return patch_file


def _git_apply(repo: Path, patch_file: Path) -> None:
    _run(["git", "apply", "--check", str(patch_file)], repo)
    applied = _run(["git", "apply", "-v", str(patch_file)], repo)
    # git apply silently relocates hunks whose line numbers are off; -v reports it.
    assert "offset" not in applied.stderr, applied.stderr


def _gnu_patch(root: Path, patch_file: Path) -> None:
    result = _run(
        ["patch", "-p1", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(patch_file)], root
    )
    assert "offset" not in result.stdout and "fuzz" not in result.stdout, result.stdout


def _git_diff(repo: Path) -> str:
    """git's own patch for the worktree change staged in ``repo``, minus the ``index`` line."""
    _run(["git", "add", "-A"], repo)
    diff = _run(
        ["git", "diff", "--cached", "--no-renames", "--no-color", "--no-ext-diff", "-U3", "HEAD"], repo
    ).stdout
    lines = [line for line in split_lines(diff) if not line.startswith("index ")]
    # Drop the optional function-name context git appends to hunk headers.
    return re.sub(r"(?m)^(@@ -\S+ \+\S+ @@).*$", r"\1", "".join(lines))


def _init_repo(repo: Path, old: str | None) -> None:
    _write_tree(repo, old)
    _run(["git", "init", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-q", "--allow-empty", "-m", "old"], repo)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_git_apply_produces_new(case: Case, tmp_path: Path) -> None:
    patch_text = make_patch(PATH, case.old, case.new)
    repo = tmp_path / "repo"
    _init_repo(repo, case.old)
    _git_apply(repo, _write_patch(tmp_path, patch_text))
    assert _read_tree(repo) == _expected(case)


# GNU patch 2.7 cannot delete an empty file: it sees the hunk-less deletion as "already
# empty", assumes -R and keeps the file (it does the same with git's own diff).
_GNU_PATCH_CASES = [
    pytest.param(case, id=case.name, marks=pytest.mark.xfail(strict=True, reason="GNU patch limitation"))
    if case.name == "deleted_empty_file"
    else pytest.param(case, id=case.name)
    for case in CASES
]


@pytest.mark.parametrize("case", _GNU_PATCH_CASES)
def test_gnu_patch_produces_new(case: Case, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    _write_tree(root, case.old)
    _gnu_patch(root, _write_patch(tmp_path, make_patch(PATH, case.old, case.new)))
    assert _read_tree(root) == _expected(case)


_GIT_IDENTICAL_CASES = [case for case in CASES if case.git_identical]


@pytest.mark.parametrize("case", _GIT_IDENTICAL_CASES, ids=[case.name for case in _GIT_IDENTICAL_CASES])
def test_identical_to_git_diff(case: Case, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _init_repo(repo, case.old)
    target = repo / PATH
    if case.new is None:
        target.unlink()
    else:
        _write_tree(repo, case.new)
    assert make_patch(PATH, case.old, case.new) == _git_diff(repo)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hunk_headers(case: Case) -> None:
    patch_text = make_patch(PATH, case.old, case.new)
    assert tuple(re.findall(r"(?m)^@@ .* @@$", patch_text)) == case.hunk_headers


def test_no_newline_marker_placement() -> None:
    patch_text = make_patch("f.py", "a\nb", "a\nc")
    assert patch_text.endswith(
        "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    )


def test_headers_for_new_and_deleted_files() -> None:
    assert make_patch("pkg/new.py", None, "x\n") == (
        "diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+x\n"
    )
    assert make_patch("pkg/old.py", "x\n", None) == (
        "diff --git a/pkg/old.py b/pkg/old.py\ndeleted file mode 100644\n"
        "--- a/pkg/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )


def test_unchanged_is_empty() -> None:
    assert make_patch(PATH, BASE, BASE) == ""
    assert make_patch(PATH, None, None) == ""


def test_path_with_space_applies(tmp_path: Path) -> None:
    path = "docs/my notes.txt"
    patch_text = make_patch(path, "a\nb\n", "a\nc\n")
    assert "--- a/docs/my notes.txt\t\n+++ b/docs/my notes.txt\t\n" in patch_text
    for tool in ("git", "patch"):
        root = tmp_path / tool
        (root / "docs").mkdir(parents=True)
        (root / path).write_bytes(b"a\nb\n")
        patch_file = _write_patch(tmp_path, patch_text)
        if tool == "git":
            _git_apply(root, patch_file)
        else:
            _gnu_patch(root, patch_file)
        assert (root / path).read_bytes() == b"a\nc\n"


BAD_PATHS = ["", "/abs.py", "a//b.py", "a/../b.py", "./a.py", "dir/", 'q"uote.py', "tab\t.py", "é.py"]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_rejects_paths_git_would_quote_or_misread(path: str) -> None:
    with pytest.raises(ValueError):
        make_patch(path, "a\n", "b\n")


def test_harness_detects_wrong_hunk_position(tmp_path: Path) -> None:
    """A hunk whose line numbers are off still applies in git, so the harness must notice it."""
    case = CASES[0]
    wrong = make_patch(PATH, case.old, case.new).replace("@@ -7,7 +7,7 @@", "@@ -5,7 +5,7 @@")
    repo = tmp_path / "repo"
    _init_repo(repo, case.old)
    with pytest.raises(AssertionError, match="offset"):
        _git_apply(repo, _write_patch(tmp_path, wrong))
    root = tmp_path / "tree"
    _write_tree(root, case.old)
    with pytest.raises(AssertionError, match="offset"):
        _gnu_patch(root, _write_patch(tmp_path, wrong))


def test_split_lines_only_on_newline() -> None:
    assert split_lines("") == []
    assert split_lines("a") == ["a"]
    assert split_lines("a\r\nb\x0cc\rd\n") == ["a\r\n", "b\x0cc\rd\n"]
    assert split_lines("\n\n") == ["\n", "\n"]


def test_write_patch_set_is_numbered_in_path_order() -> None:
    patches = {
        "megatron/core/b.py": "patch b\n",
        "megatron/a.py": "patch a\n",
        "megatron/core/unchanged.py": "",
        "megatron/core/a.py": "patch core a\n",
    }
    assert write_patch_set(patches) == {
        "0001-megatron-a.py.patch": "patch a\n",
        "0002-megatron-core-a.py.patch": "patch core a\n",
        "0003-megatron-core-b.py.patch": "patch b\n",
        "series": "0001-megatron-a.py.patch\n0002-megatron-core-a.py.patch\n0003-megatron-core-b.py.patch\n",
    }
    assert list(write_patch_set(dict(reversed(list(patches.items()))))) == list(write_patch_set(patches))
    assert write_patch_set({}) == {"series": ""}


def test_patch_set_applies_in_series_order(tmp_path: Path) -> None:
    old = {"megatron/a.py": "a\n", "megatron/core/b.py": "b\n"}
    new = {"megatron/a.py": "A\n", "megatron/core/b.py": "b\nB\n", "megatron/core/c.py": "c\n"}
    paths = sorted(old.keys() | new.keys())
    files = write_patch_set({p: make_patch(p, old.get(p), new.get(p)) for p in paths})
    repo = tmp_path / "repo"
    write_files(repo, old)
    _run(["git", "init", "-q"], repo)
    patch_dir = tmp_path / "patches"
    patch_dir.mkdir()
    for name, text in files.items():
        (patch_dir / name).write_text(text)
    for name in (patch_dir / "series").read_text().splitlines():
        _git_apply(repo, patch_dir / name)
    assert {p: (repo / p).read_text() for p in paths} == new


def test_head_tail_matching_is_a_valid_earliest_placement() -> None:
    """Matching the common head and tail first must still give opcodes that turn old into new,
    with every ambiguous insertion or deletion placed as early as it can go."""
    rng = random.Random(20261203)
    lines = ["\n", "a\n", "b\n", "c\n", "import x\n"]
    for _ in range(2000):
        old = [rng.choice(lines) for _ in range(rng.randint(0, 25))]
        new = list(old)
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(new))
            if rng.random() < 0.5 or not new:
                new[at:at] = [rng.choice(lines) for _ in range(rng.randint(1, 3))]
            else:
                del new[at : at + rng.randint(1, 2)]
        codes = _HeadTailMatcher(old, new).get_opcodes()
        rebuilt: list[str] = []
        for tag, i1, i2, j1, j2 in codes:
            if tag == "equal":
                assert old[i1:i2] == new[j1:j2], (old, new, codes)
            rebuilt += new[j1:j2]
        assert rebuilt == new and (not codes or (codes[-1][2], codes[-1][4]) == (len(old), len(new)))
        for before, (tag, i1, i2, j1, j2) in itertools.pairwise(codes):
            if tag in ("insert", "delete") and before[0] == "equal":
                last = new[j2 - 1] if tag == "insert" else old[i2 - 1]
                assert last != old[i1 - 1], ("could move up", old, new, codes)
