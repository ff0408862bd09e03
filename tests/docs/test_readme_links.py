"""README.md is read on its own (GitHub, an editor), outside the site's link check: every local
link and picture it names exists, every heading anchor it uses is a heading of the page, and it
stays a front door (at most about 250 lines)."""

from __future__ import annotations

import re

from tests.support.doc_blocks import README, REPO

LINK = re.compile(r"\]\((?!https?:)([^)#\s]*)(?:#([^)\s]+))?\)")


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_local_links_exist() -> None:
    text = README.read_text(encoding="utf-8")
    links = LINK.findall(text)
    assert len(links) > 10
    for target, anchor in links:
        path = REPO / target if target else README
        assert path.exists(), target
        if anchor and path.suffix == ".md":
            headings = re.findall(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"{target}#{anchor}"


def test_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250
