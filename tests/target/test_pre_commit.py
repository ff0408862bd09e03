"""The pre-commit hooks of .pre-commit-hooks.yaml, run by pre-commit itself, offline; and
``python -m codegen`` behaving as the console script.

pre-commit would install a ``language: python`` hook into an environment of its own (pip, from
the network); the test instead declares the same hooks (entry, args, files, pass_filenames taken
from the manifest) as ``repo: local`` hooks with ``language: system``, which run the ``codegen``
installed here. Everything else is pre-commit's real run over a git repository holding the specs
and generated/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.target.conftest import REPO, SPECS

MANIFEST = REPO / ".pre-commit-hooks.yaml"


def _pre_commit(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        PRE_COMMIT_HOME=str(home),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_manifest_is_valid(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit", reason="pre-commit is in the test extra (tox -e test)")
    result = _pre_commit("validate-manifest", str(MANIFEST), cwd=REPO, home=tmp_path / "home")
    assert result.returncode == 0, result.stdout + result.stderr
    hooks = {h["id"]: h for h in yaml.safe_load(MANIFEST.read_text())}
    assert hooks["codegen-check"]["entry"] == "codegen apply --check"
    assert hooks["codegen-validate"]["entry"] == "codegen validate"


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with the specs, generated/ and the manifest's hooks as local hooks."""
    pytest.importorskip("pre_commit", reason="pre-commit is in the test extra (tox -e test)")
    root = tmp_path_factory.mktemp("hook-repo")
    shutil.copytree(SPECS, root / "specs")
    shutil.copytree(REPO / "generated", root / "generated")
    local = []
    for hook in yaml.safe_load(MANIFEST.read_text()):
        assert hook["language"] == "python"
        local.append({**hook, "language": "system"})
    config = {"repos": [{"repo": "local", "hooks": local}]}
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "specs"], cwd=root, check=True)
    return root


def test_hooks_pass_on_a_fresh_generated_tree(hook_repo: Path, tmp_path: Path) -> None:
    result = _pre_commit("run", "--all-files", cwd=hook_repo, home=tmp_path / "home")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "generated/ is up to date with the specs" in result.stdout
    assert "the specs resolve against the sources" in result.stdout
    assert result.stdout.count("Passed") == 2


def test_check_hook_fails_on_a_stale_generated_tree(hook_repo: Path, tmp_path: Path) -> None:
    page = hook_repo / "generated" / "docs" / "spans.md"
    original = page.read_text()
    try:
        page.write_text(original.replace("megatron.layer.forward", "megatron.layer.fwd", 1))
        result = _pre_commit(
            "run",
            "codegen-check",
            "--files",
            "generated/docs/spans.md",
            cwd=hook_repo,
            home=tmp_path / "home",
        )
    finally:
        page.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "generated is stale: run 'codegen apply specs'" in result.stdout
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
