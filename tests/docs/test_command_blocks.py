"""Every command block of README.md and of the user guide (docs/guide/*.md) runs in a test exactly
as written: each is marked (``<!-- readme: NAME -->``, see tests/support/doc_blocks.py), each guide
block is run by a test that names it, and each README block is, word for word, the guide's block
of the same name (the README shows the shortest path; the guide's tests run it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.doc_blocks import _BLOCK, GUIDE, README, REPO, SETUP, blocks

FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
SHELL = {"sh", "bash", "shell", "console"}
PAGES = sorted(GUIDE.glob("*.md"))
TESTS = "".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "tests").rglob("test_*.py")))


def _unmarked_shell_blocks(text: str) -> list[str]:
    marked = {m.start("body") for m in _BLOCK.finditer(text)}
    return [
        m["body"][:80] for m in FENCE.finditer(text) if m["lang"] in SHELL and m.start("body") not in marked
    ]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_every_shell_block_is_marked(page: Path) -> None:
    assert _unmarked_shell_blocks(page.read_text(encoding="utf-8")) == []


def test_an_unmarked_block_is_found() -> None:
    """The check above can fail."""
    text = "<!-- readme: a -->\n```sh\necho a\n```\n\n```sh\necho b\n```\n"
    assert _unmarked_shell_blocks(text) == ["echo b\n"]


def _guide_blocks() -> dict[str, tuple[Path, str]]:
    found: dict[str, tuple[Path, str]] = {}
    for page in PAGES:
        for name, body in blocks(page).items():
            # a block on several pages (the job's environment, the example file) is the same on each
            assert name not in found or found[name][1] == body, (
                f"block {name!r} differs between {page.name} and {found[name][0].name}"
            )
            found.setdefault(name, (page, body))
    return found


def test_readme_blocks_are_the_guides() -> None:
    guide = _guide_blocks()
    readme = blocks(README)
    assert {"setup", "ci", "package", "patch", "install", "flags", "otlp", "in-place"} <= set(readme)
    for name, body in readme.items():
        assert name in guide, f"README block {name!r} is on no guide page"
        assert body == guide[name][1], f"README block {name!r} differs from {guide[name][0].name}'s"


def test_every_guide_block_is_run_by_a_named_test() -> None:
    for name, (page, _) in _guide_blocks().items():
        if name in ("setup", "ci"):
            continue  # test_setup_blocks below
        word = name.removeprefix("file ")
        assert f'"{name}"' in TESTS or (name.startswith("file ") and word in TESTS), (
            f"no test runs block {name!r} of {page.name}"
        )


def test_ci_block_is_what_ci_runs() -> None:
    """The test command is .ci/run's last line, which CI runs on every push."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert blocks(SETUP)["ci"].strip() == ci
