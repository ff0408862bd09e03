"""Every size the manual and the README quote of the generated change comes from one count: the
table of docs/reference/main-size.md (rendered by tests/upstream/test_main_size.py). A paragraph
that links that page quotes only its figures, and a line count said of the runtime sits in such a
paragraph (the runtime's size was once given as three different numbers)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.doc_blocks import REPO

PAGE = REPO / "docs" / "reference" / "main-size.md"
LINES = re.compile(r"(\d[\d,]*) (?:added )?lines\b")
OF_THE_RUNTIME = re.compile(r"(?:runtime|megatron/core/otel)[^.;]{0,80}?\b(\d[\d,]*) lines\b")


def figures() -> set[int]:
    """Every number in main-size.md's table."""
    rows = re.findall(r"^\| [^|]+ \| (\d+) \| (\d+) \|$", PAGE.read_text(), re.MULTILINE)
    assert len(rows) >= 10, "main-size.md's table not found"
    return {int(n) for row in rows for n in row}


def paragraphs() -> list[tuple[Path, str]]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    out = []
    for page in pages:
        relative = page.relative_to(REPO)
        if page == PAGE or relative.parts[:2] == ("docs", "taxonomy"):
            continue
        out += [(relative, p) for p in re.split(r"\n\s*\n", page.read_text(encoding="utf-8"))]
    return out


def stale(text: str, known: set[int]) -> list[str]:
    """The line counts ``text`` quotes that main-size.md does not hold."""
    return [quoted for quoted in LINES.findall(text) if int(quoted.replace(",", "")) not in known]


def test_a_paragraph_citing_main_size_quotes_only_its_figures() -> None:
    known = figures()
    citing = [(page, text) for page, text in paragraphs() if "main-size" in text]
    assert len(citing) >= 3
    for page, text in citing:
        assert not stale(text, known), f"{page}: not in main-size.md: {stale(text, known)}"


def test_the_runtimes_size_is_quoted_only_from_main_size() -> None:
    for page, text in paragraphs():
        flat = " ".join(text.split())
        if OF_THE_RUNTIME.search(flat):
            assert "main-size" in flat, (
                f"{page}: the runtime's size quoted without main-size.md: {flat[:200]}"
            )


def test_a_stale_figure_is_caught() -> None:
    """The checks themselves, on the sentences the guides once held."""
    known = figures()
    old = "copies it into the tree as `megatron/core/otel/`, about 4,600 lines a Megatron maintainer"
    assert stale(old + " ([main-size.md](../reference/main-size.md))", known) == ["4,600"]
    assert OF_THE_RUNTIME.search("The new runtime package (`megatron/core/otel/`, about 2,300 lines")
