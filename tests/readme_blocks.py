"""The README's "Review and carry the patches" blocks, as the tests run them.

A block is named by the HTML comment on the line before its fence: ``<!-- readme: NAME -->`` (a
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

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SECTION = "## Review and carry the patches"
INSTALLED = "## Instrument an installed Megatron"
_BLOCK = re.compile(
    r"^<!-- readme: (?P<name>[^>]+?) -->\n```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL
)


def blocks(heading: str = SECTION) -> dict[str, str]:
    """``{name: text}`` of every marked block of the section (``file NAME`` for files)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    section = text[start : end if end != -1 else len(text)]
    found: dict[str, str] = {}
    for match in _BLOCK.finditer(section):
        assert match["name"] not in found, f"two README blocks named {match['name']!r}"
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
    heading: str = SECTION,
    bindir: Path | None = None,
) -> str:
    """Run the README's shell block ``name`` with ``bash -e`` in ``cwd``; return its output."""
    environment = dict(os.environ if env is None else env)
    # `python` is the interpreter running the tests (its environment has what the block needs)
    first = bindir or Path(sys.executable).parent  # or the environment a test made for the block
    environment["PATH"] = f"{first}{os.pathsep}{environment.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-e", "-c", blocks(heading)[name]],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, (
        f"README block {name!r} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
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
