"""The pre-commit hooks of .pre-commit-hooks.yaml, installed and run by pre-commit itself as for a
user; and ``python -m codegen`` behaving as the console script.

The hook repository is a local git clone of this checkout (its files, committed): pre-commit
clones it at that commit, builds its ``language: python`` environment and ``pip install``s the
generator into it (non-editable, as for every user; pip resolves from the index it is configured
with, held to constraints.txt under tox). Then pre-commit's real run over a git repository holding
the specs and generated/.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.git_repo import copy_checkout, git
from tests.support.paths import REPO, SPECS
from tests.support.pre_commit import pre_commit

MANIFEST = REPO / ".pre-commit-hooks.yaml"


def test_manifest_is_valid(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit", reason="pre-commit is in the test extra (tox -e test)")
    result = pre_commit("validate-manifest", str(MANIFEST), cwd=REPO, home=tmp_path / "home")
    assert result.returncode == 0, result.stdout + result.stderr
    hooks = {h["id"]: h for h in yaml.safe_load(MANIFEST.read_text())}
    assert hooks["codegen-check"]["entry"] == "codegen apply --check"
    assert hooks["codegen-validate"]["entry"] == "codegen validate"


def _commit_all(root: Path, message: str) -> str:
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def hooks_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PRE_COMMIT_HOME shared by the module's runs: pre-commit installs the hooks once."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with the specs and generated/ whose .pre-commit-config.yaml names the
    hooks by id from a local clone of this checkout (its tracked and new files, committed)."""
    pytest.importorskip("pre_commit", reason="pre-commit is in the test extra (tox -e test)")
    clone = tmp_path_factory.mktemp("hooks-source")
    copy_checkout(clone)
    rev = _commit_all(clone, "the generator")
    root = tmp_path_factory.mktemp("hook-repo")
    shutil.copytree(SPECS, root / "specs")
    shutil.copytree(REPO / "generated", root / "generated")
    hooks = [
        {"id": hook["id"]}
        for hook in yaml.safe_load(MANIFEST.read_text())
        if hook["id"] != "codegen-check-in-place"  # for a Megatron-LM checkout: tests/inplace/
    ]
    assert [h["id"] for h in hooks] == ["codegen-check", "codegen-validate"]
    config = {"repos": [{"repo": str(clone), "rev": rev, "hooks": hooks}]}
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    _commit_all(root, "specs")
    return root


def test_hooks_pass_on_a_fresh_generated_tree(hook_repo: Path, hooks_home: Path) -> None:
    result = pre_commit("run", "--all-files", cwd=hook_repo, home=hooks_home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "generated/ is up to date with the specs" in result.stdout
    assert "the specs resolve against the sources" in result.stdout
    assert result.stdout.count("Passed") == 2
    # pre-commit built the hooks' environment itself: the generator there is installed, not this checkout
    (env,) = [p for p in hooks_home.glob("repo*/py_env-*") if p.is_dir()]
    installed = list(env.glob("lib/python*/site-packages/codegen/templates/docs/spans.md.j2"))
    assert installed, f"no installed codegen package in {env}"


def test_check_hook_fails_on_a_stale_generated_tree(hook_repo: Path, hooks_home: Path) -> None:
    page = hook_repo / "generated" / "docs" / "spans.md"
    original = page.read_text()
    try:
        page.write_text(original.replace("megatron.layer.forward", "megatron.layer.fwd", 1))
        result = pre_commit(
            "run", "codegen-check", "--files", "generated/docs/spans.md", cwd=hook_repo, home=hooks_home
        )
    finally:
        page.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    # the command to run, as the hook ran it (its args), less --check: valid where it ran
    assert "generated is stale: run 'codegen apply specs/'" in result.stdout
    assert "-" in result.stdout and "megatron.layer.fwd" in result.stdout  # the diff is shown


def test_python_dash_m_is_the_console_script() -> None:
    module = subprocess.run([sys.executable, "-m", "codegen", "--help"], capture_output=True, text=True)
    script = subprocess.run(
        [str(Path(sys.executable).parent / "codegen"), "--help"], capture_output=True, text=True
    )
    assert module.returncode == script.returncode == 0
    assert module.stdout == script.stdout
    assert module.stdout.startswith("usage: codegen ")
    bad = subprocess.run(
        [sys.executable, "-m", "codegen", "validate", "no/such/dir"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "no such spec directory" in bad.stderr
