"""The manual (docs/) builds as `tox -e docs` builds it, every warning an error, and renders in a
real browser: headless Chromium (as tests/support/browser.py drives it) opens the index and a
user-guide page with no console message (a missing stylesheet, script or picture is one) and every
local resource the pages name exists. `tox -e docs` runs this after its build."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.cli import build_parser
from tests.support.browser import artifacts, browse, console_messages
from tests.support.doc_blocks import REPO
from tests.support.modules import load_file

pytest.importorskip("sphinx", reason="Sphinx is in the docs extra: tox -e docs runs this test")
pytest.importorskip("myst_parser", reason="MyST is in the docs extra: tox -e docs runs this test")

DOCS = REPO / "docs"
SCREENSHOT = DOCS / "images" / "docs-index.png"
LOCAL = re.compile(r'(?:src|href)="(?!https?:|mailto:|#|data:)([^"#?]+)')


def build(out: Path, docs: Path = DOCS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html", str(docs), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: ``$CODEGEN_DOCS_SITE`` when set (``tox -e docs`` builds it once, with the
    same options, just before), else a build of its own."""
    built = os.environ.get("CODEGEN_DOCS_SITE")
    if built:
        assert (Path(built) / "index.html").is_file(), f"CODEGEN_DOCS_SITE={built} holds no built site"
        return Path(built)
    out = tmp_path_factory.mktemp("site")
    result = build(out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """-W catches a link to a heading that is not there (the check the site relies on): a small
    site on the manual's own conf.py and extensions builds clean, and fails once one of its pages
    links to a missing heading."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for kept in ("conf.py", "_ext", "_static"):
        source = DOCS / kept
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, docs / kept)
    (tmp_path / "generated" / "docs").mkdir(parents=True)  # conf.py copies it in as taxonomy/
    (tmp_path / "generated" / "docs" / "index.md").write_text("# Taxonomy\n")
    (docs / "index.md").write_text("# Site\n\n```{toctree}\nexport\nconfiguration\ntaxonomy/index\n```\n")
    (docs / "export.md").write_text("# Export\n\n## A real heading\n")
    page = docs / "configuration.md"
    page.write_text("# Configuration\n\nSee [there](export.md#a-real-heading).\n")
    clean = build(tmp_path / "clean", docs)
    assert clean.returncode == 0, clean.stderr[-2000:]
    page.write_text(page.read_text() + "\nSee [nowhere](export.md#no-such-heading).\n")
    result = build(tmp_path / "out", docs)
    assert result.returncode != 0 and "no-such-heading" in result.stderr, result.stderr[-2000:]


def test_cli_page_lists_every_command(site: Path) -> None:
    page = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    commands = load_file(DOCS / "_ext" / "cli_page.py").commands
    assert "with --source" in page  # option names in the help stay as written (no en dash)
    for name, sub in commands(build_parser()).items():
        assert f"codegen {name}" in page, name
        for action in sub._actions:
            for option in action.option_strings:
                assert option in page, (name, option)


@pytest.mark.parametrize("page", ["index.html", "guide/installed.html"])
def test_page_renders_in_chromium(site: Path, tmp_path: Path, page: str) -> None:
    path = site / page
    html = path.read_text(encoding="utf-8")
    missing = [ref for ref in LOCAL.findall(html) if not (path.parent / ref).exists()]
    assert missing == []
    result = browse(path, tmp_path / "profile", "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_messages(result.stderr) == [], result.stderr[-3000:]
    dom = result.stdout
    assert "<h1>" in dom and 'class="sphinxsidebar"' in dom  # the theme's layout, its CSS loaded
    if page == "index.html":
        shot = artifacts() / "docs-index.png"
        shot.unlink(missing_ok=True)
        taken = browse(path, tmp_path / "shot", f"--screenshot={shot}", "--window-size=1280,1000")
        assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr[-2000:]


def test_screenshot_is_committed() -> None:
    data = SCREENSHOT.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def _main_body(dom: str) -> str:
    start = dom.index('<div class="body" role="main">')
    return dom[start : dom.index('<div class="sphinxsidebar"', start)]


def test_front_page_lists_the_user_guide_once(site: Path, tmp_path: Path) -> None:
    """One list of the user guide on the front page (it was listed twice: the page's own list and
    the toctree's), naming every guide page; the sidebar still carries the toctree."""
    result = browse(site / "index.html", tmp_path / "profile", "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    body = _main_body(result.stdout)
    for page in sorted((DOCS / "guide").glob("*.md")):
        link = f'href="guide/{page.stem}.html"'
        assert body.count(link) == 1, (page.name, body.count(link))
    assert 'href="guide/installed.html"' in result.stdout.split('<div class="sphinxsidebar"', 1)[1]


PROBE = """<script>
window.addEventListener("load", function () {
  const blocks = Array.from(document.querySelectorAll("div.body pre"));
  const cut = blocks.filter(function (p) {
    return p.scrollWidth > p.clientWidth + 1 && getComputedStyle(p).whiteSpace !== "pre-wrap";
  });
  document.body.setAttribute("data-pre", String(blocks.length));
  document.body.setAttribute("data-cut", cut.map(function (p) { return p.textContent.slice(0, 60); }).join(" | "));
  document.body.setAttribute("data-wrapped", String(blocks.filter(function (p) {
    return getComputedStyle(p).whiteSpace === "pre-wrap";
  }).length));
});
</script>"""


def test_long_commands_in_code_blocks_wrap_instead_of_being_cut(site: Path, tmp_path: Path) -> None:
    """At a 900-pixel window the guide's long pip commands are wider than the text column: every
    code block wraps them (white-space: pre-wrap), none is cut at the right edge. The page is
    measured in Chromium by a probe script added to a copy beside it (its CSS loads as the site's)."""
    page = site / "guide" / "installed.html"
    probe = page.with_name("_probe-installed.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    try:
        result = browse(probe, tmp_path / "profile", "--dump-dom", "--window-size=900,800")
    finally:
        probe.unlink()
    assert result.returncode == 0, result.stderr[-2000:]
    found = dict(re.findall(r'data-(pre|cut|wrapped)="([^"]*)"', result.stdout))
    assert int(found["pre"]) >= 5, found
    assert found["cut"] == "", found
    assert found["wrapped"] == found["pre"], found
