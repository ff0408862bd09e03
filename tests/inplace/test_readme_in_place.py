"""README "Keep the specs in your Megatron-LM repository", run as written with the project's specs.

The clone runs as written: git's ``url.<base>.insteadOf`` (through ``GIT_CONFIG_*``) sends
``https://github.com/NVIDIA/Megatron-LM.git`` to a local repository holding the pristine
megatron-core 0.19.2 tree, tagged ``core_v0.19.2`` (``upstream``). The in-place commit is the
module's fixture; the tests check it against the patch set, the README's size table and Megatron's
linters, re-apply and check it, and check the README's pre-commit configuration (the hook itself is
run by pre-commit in test_in_place.py, with the same args).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.doc_blocks import IN_REPO, env_redirecting_clone, run_block, workspace
from tests.support.doc_blocks import blocks as page_blocks
from tests.support.git_repo import IDENTITY, clone, git
from tests.support.megatron_linters import flake8_findings, isort_format, new_formatter_findings, write_tree
from tests.support.paths import REPO
from tests.support.pre_commit import HOOK_ARGS
from tests.support.serving_files import SERVING_FILES, instrumented

MANIFEST = "megatron/core/otel/_in_place.json"


def section() -> str:
    return IN_REPO.read_text(encoding="utf-8")


def blocks() -> dict[str, str]:
    return page_blocks(IN_REPO)


def _env(upstream: Path) -> dict[str, str]:
    return env_redirecting_clone(upstream) | IDENTITY


@pytest.fixture(scope="module")
def applied(upstream: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    """(the checkout after the README's in-place block, the block's output, the environment)."""
    root = workspace(tmp_path_factory.mktemp("readme-in-place") / "work")
    env = _env(upstream)
    output = run_block("in-place", root, env, timeout=900, page=IN_REPO)
    return root / "Megatron-LM", output, env


def test_in_place_block_commits_the_instrumented_checkout(applied: tuple[Path, str, dict[str, str]]) -> None:
    checkout, output, _ = applied
    assert (
        git(checkout, "log", "-1", "--format=%s").strip()
        == "OpenTelemetry instrumentation generated from specs/"
    )
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""
    assert "+126 -15  megatron/training/training.py" in output
    committed = set(git(checkout, "diff", "--name-only", "HEAD~1", "HEAD").split())
    assert MANIFEST in committed and "docs/otel/spans.md" in committed and "specs/training.yaml" in committed
    # issue 40: the inference server's and the dynamic engine's modules too
    assert set(SERVING_FILES) <= committed
    for path in SERVING_FILES:
        assert instrumented(path, (checkout / path).read_text(encoding="utf-8")), path


def test_the_change_is_the_patch_set_byte_for_byte(
    applied: tuple[Path, str, dict[str, str]], upstream: Path, tmp_path: Path
) -> None:
    checkout, _, _ = applied
    patched = clone(upstream, tmp_path / "patched")
    series = (REPO / "generated" / "patches" / "series").read_text().split()
    git(patched, "apply", *[str(REPO / "generated" / "patches" / name) for name in series])
    touched = {
        line[3:] for line in git(patched, "status", "--porcelain", "--untracked-files=all").splitlines()
    }
    assert len(touched) > 20
    for path in sorted(touched):
        assert (checkout / path).read_bytes() == (patched / path).read_bytes(), path
    in_place = set(git(checkout, "diff", "--name-only", "HEAD~1", "HEAD", "--", "megatron").split())
    assert in_place - touched == {MANIFEST}


def test_readme_size_table_is_the_commit(applied: tuple[Path, str, dict[str, str]]) -> None:
    checkout, _, _ = applied
    table = {
        m[1]: (int(m[2]), int(m[3]))
        for m in re.finditer(r"^\| `([^`]+)` \| (\d+) \| (\d+) \|$", section(), re.MULTILINE)
    }
    numstat = git(checkout, "diff", "--numstat", "HEAD~1", "HEAD", "--", "megatron")
    measured = {}
    for line in numstat.splitlines():
        added, removed, path = line.split("\t")
        if not path.startswith("megatron/core/otel/"):
            measured[path] = (int(added), int(removed))
    assert table == measured
    assert measured["megatron/training/training.py"] == (126, 15)


def test_generated_lines_pass_isort_and_flake8(
    applied: tuple[Path, str, dict[str, str]], tmp_path: Path
) -> None:
    """Megatron's isort and flake8 settings, as tests/target/test_megatron_linters.py runs them,
    on the committed change: no finding the pristine files did not have."""
    pytest.importorskip("isort", reason="isort is in the test extra (tox -e test)")
    pytest.importorskip("flake8", reason="flake8 is in the test extra (tox -e test)")

    checkout, _, _ = applied
    paths = [
        p
        for p in git(checkout, "diff", "--name-only", "HEAD~1", "HEAD", "--", "megatron").split()
        if p.endswith(".py")
    ]
    old = {p: git(checkout, "show", f"HEAD~1:{p}") for p in paths if not p.startswith("megatron/core/otel/")}
    new = {p: (checkout / p).read_text(encoding="utf-8") for p in paths}
    isort_findings = {p: f for p in old if (f := new_formatter_findings(old[p], new[p], isort_format))}
    assert isort_findings == {}
    before = flake8_findings(tmp_path / "pristine", write_tree(tmp_path / "pristine", old))
    after = flake8_findings(tmp_path / "in-place", write_tree(tmp_path / "in-place", new))
    assert not after - before, sorted(after - before)


def test_reapply_changes_nothing_and_the_check_block_passes(
    applied: tuple[Path, str, dict[str, str]],
) -> None:
    checkout, _, env = applied
    apply = blocks()["in-place"].splitlines()[4]
    assert apply.startswith("../megatron-otel-codegen/.venv/bin/codegen apply") and "--check" not in apply
    again = subprocess.run(
        ["bash", "-e", "-c", apply], check=False, cwd=checkout, env=env, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert "nothing to write" in again.stdout
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""
    output = run_block("in-place-check", checkout, env, timeout=900, page=IN_REPO)
    assert ". is up to date with specs" in output


def test_pre_commit_configuration_is_the_hook_the_in_place_test_runs(tmp_path: Path) -> None:
    """The README's configuration is valid for pre-commit, names the manifest's in-place hook, and
    passes the args with which tests/inplace/test_in_place.py runs that hook through pre-commit
    (a run here would cost another whole generation)."""
    pytest.importorskip("pre_commit", reason="pre-commit is in the test extra (tox -e test)")
    text = blocks()["file .pre-commit-config.yaml"]
    (tmp_path / ".pre-commit-config.yaml").write_text(text)
    environment = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "home"))
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml"],
        check=False,
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [entry] = yaml.safe_load(text)["repos"][0]["hooks"]
    manifest = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    assert entry["id"] in manifest and entry["args"] == HOOK_ARGS
    apply = blocks()["in-place"].splitlines()[4]
    assert apply.endswith(" ".join(["--in-place", *HOOK_ARGS[1:]]))  # the docs folder the apply names
