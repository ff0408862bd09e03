"""The command blocks of README.md and of the user guide's pages (docs/guide/), as the tests run them.

Any Markdown file works: ``blocks(page)`` reads every marked block of it. A block is named by the HTML comment on the line before its fence: ``<!-- readme: NAME -->`` (a
shell block the tests run) or ``<!-- readme: file NAME -->`` (a file the tests write). The tests
build a workspace as the section describes: this repository as ``megatron-otel-codegen/`` (its
``specs/``, ``generated/`` and ``constraints.txt`` copied, ``.venv/bin/codegen`` the running
environment's console script) beside whatever the blocks create.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
GUIDE = REPO / "docs" / "guide"
SETUP = GUIDE / "setup.md"
INSTALLED = GUIDE / "installed.md"
PATCHES = GUIDE / "patches.md"
IN_REPO = GUIDE / "in-repo.md"
REPORT = GUIDE / "report.md"
_BLOCK = re.compile(
    r"^<!-- readme: (?P<name>[^>]+?) -->\n```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL
)


def blocks(page: Path = PATCHES) -> dict[str, str]:
    """``{name: text}`` of every marked block of the Markdown file ``page`` (``file NAME`` for
    files)."""
    found: dict[str, str] = {}
    for match in _BLOCK.finditer(page.read_text(encoding="utf-8")):
        assert match["name"] not in found, f"two blocks named {match['name']!r} in {page}"
        found[match["name"]] = match["body"]
    return found


def workspace(root: Path) -> Path:
    """``root`` with ``megatron-otel-codegen/`` as the README's commands expect it."""
    repo = root / "megatron-otel-codegen"
    repo.mkdir(parents=True)
    for name in ("specs", "generated"):
        shutil.copytree(REPO / name, repo / name)
    shutil.copy2(REPO / "constraints.txt", repo / "constraints.txt")
    script = shutil.which("codegen", path=str(Path(sys.executable).parent)) or shutil.which("codegen")
    assert script, "the codegen console script is not installed"
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "codegen").symlink_to(script)
    return root


def run_block(
    name: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: int = 600,
    page: Path = PATCHES,
    bindir: Path | None = None,
) -> str:
    """Run the shell block ``name`` of ``page`` with ``bash -e`` in ``cwd``; return its output."""
    environment = dict(os.environ if env is None else env)
    # `python` is the interpreter running the tests (its environment has what the block needs)
    first = bindir or Path(sys.executable).parent  # or the environment a test made for the block
    environment["PATH"] = f"{first}{os.pathsep}{environment.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-e", "-c", blocks(page)[name]],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, (
        f"block {name!r} of {page.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout + result.stderr


UPSTREAM_URL = "https://github.com/NVIDIA/Megatron-LM.git"


def env_redirecting_clone(upstream: Path) -> dict[str, str]:
    """The environment with git redirecting clones of Megatron-LM's URL to ``upstream`` (a local
    repository), so a README block's ``git clone`` runs as written without the network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0=f"url.{upstream.as_uri()}.insteadOf",
        GIT_CONFIG_VALUE_0=UPSTREAM_URL,
        GIT_TERMINAL_PROMPT="0",
    )
    return env
