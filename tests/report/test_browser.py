"""The HTML page in a real browser: headless Chromium (Debian's ``chromium``; .ci/run installs it).

Chromium loads the page from a file with networking off, runs its inline script and prints the
resulting DOM (``--dump-dom``); its console goes to stderr (``--enable-logging=stderr``), where
any message (an uncaught error above all) fails the test. A screenshot of each page is saved as a
test artifact under ``build/test-artifacts/`` (``REPORT_ARTIFACTS`` overrides the folder).

Without Chromium the test fails under tox (``CODEGEN_REQUIRE_BROWSER=1``), naming the package: it
must not pass by skipping in CI; a plain ``pytest`` run skips it, naming why (tests/support/browser.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.report.synthetic import rank_run
from tests.support.browser import artifacts, browse, console_messages
from tests.support.cli import codegen
from tests.support.paths import REPORT_DATA as DATA
from tests.support.paths import SPECS


def count(dom: str, pattern: str) -> int:
    return len(re.findall(pattern, dom))


def _pages(tmp_path: Path) -> dict[str, Path]:
    """The page of a real CPU pretrain capture (committed), and of a two-rank capture."""
    pages = {}
    out = tmp_path / "real"
    assert codegen("report", "--specs", SPECS, DATA / "fresh.jsonl", DATA / "resume.jsonl", "--out", out) == 0
    pages["real"] = out / "report.html"
    paths = []
    for rank in (0, 1):
        spans = rank_run(rank, 10 + rank, iterations=8, step=1.0 + 0.25 * rank)
        paths.append(spans.write(tmp_path / f"rank{rank}.json"))
    out = tmp_path / "ranks"
    assert codegen("report", "--specs", SPECS, *paths, "--out", out) == 0
    pages["ranks"] = out / "report.html"
    return pages


def test_the_console_check_catches_a_script_error(tmp_path):
    """The check below can fail: a page whose script throws is reported on stderr."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>undefinedFunction();</script></body></html>")
    result = browse(page, tmp_path / "profile", "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert any("undefinedFunction" in line for line in console_messages(result.stderr)), result.stderr[-3000:]


def test_page_renders_its_plots_without_console_errors(tmp_path, capsys):
    pages = _pages(tmp_path)
    capsys.readouterr()
    for name, page in pages.items():
        result = browse(page, tmp_path / f"profile-{name}", "--dump-dom")
        assert result.returncode == 0, result.stderr[-2000:]
        assert console_messages(result.stderr) == [], name
        dom = result.stdout
        assert 'data-rendered="true"' in dom, name  # the script ran to its end
        # each plot drew its elements, none empty
        assert count(dom, r'<rect[^>]*class="category"') >= 4, name  # goodput and three badput kinds at least
        assert count(dom, r'<rect[^>]*class="bar"') >= 10, name
        assert count(dom, r'<circle[^>]*class="step"') >= 4, name
        # one step line per run: the two-run capture (fresh, then resumed) is never joined
        # across the restart; every iteration is a point of its own run's line
        runs = 2 if name == "real" else 1
        lines = re.findall(r'<polyline[^>]*points="([^"]*)"[^>]*class="step-line" data-run="(\d+)"', dom)
        assert len(lines) == runs and len({run for _, run in lines}) == runs, (name, lines)
        drawn = sum(len(points.split()) for points, _ in lines)
        assert drawn == count(dom, r'<circle[^>]*class="step"'), name
        assert count(dom, r'<line[^>]*class="run-break"') == runs - 1, name
        assert not re.search(r'<rect[^>]*width="0"', dom), name
        # the step plot defines its marks where it shows them: a legend entry for the line, the
        # first iteration's pink dot, the dashed median and the dotted restart rule, each drawn
        legend = re.search(r'<ul class="legend" id="steps-legend">(.*?)</ul>', dom, re.DOTALL)
        assert legend, name
        assert re.findall(r'data-mark="(\w+)"', legend[1]) == ["step", "first", "median", "restart"], name
        assert 'stroke-dasharray="4 3"' in legend[1] and 'stroke-dasharray="2 3"' in legend[1], name
        # the x axis labels iterations along it, not only its two ends
        xticks = re.findall(r'<text[^>]*class="xtick"[^>]*>([^<]*)</text>', dom)
        assert len(xticks) >= 3 and xticks[0].endswith("0"), (name, xticks)
        assert "axis-title" in dom, name
        if name == "real":  # the resumed run's ticks name their run; the load row its iteration
            assert any(t.startswith("run 1: ") for t in xticks), xticks
            assert "4 (resumed from)" in dom
            rule = re.search(r'<p class="note" id="first-rule">(.*?)</p>', dom, re.DOTALL)[1]
            assert "its median 294.7 ms" in rule
        cells = count(dom, r'<rect[^>]*class="cell"')
        if name == "ranks":
            assert cells == 2 * 7  # two ranks, 8 iterations less the first
        else:
            assert cells == 0 and "no spread across ranks" in dom
        shot = artifacts() / f"report-{name}.png"
        shot.unlink(missing_ok=True)
        result = browse(
            page,
            tmp_path / f"shot-{name}",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            "--hide-scrollbars",
        )
        assert shot.is_file() and shot.stat().st_size > 10_000, result.stderr[-2000:]


# Run after the page's own script (appended at the end of the body): the geometry as laid out,
# into an attribute --dump-dom prints.
CHECK = """<script>
(function () {
  const box = function (n) { return n.getBoundingClientRect(); };
  const hit = function (a, b) {  // touching counts: 1 px apart at least
    return !(a.right + 1 <= b.left || b.right + 1 <= a.left || a.bottom + 1 <= b.top || b.bottom + 1 <= a.top);
  };
  const steps = document.getElementById("steps");
  const over = [];
  steps.querySelectorAll("text").forEach(function (t) {
    steps.querySelectorAll("circle.step").forEach(function (c) {
      if (hit(box(t), box(c))) { over.push(t.textContent); }
    });
  });
  const timeline = document.getElementById("timeline");
  const ticks = Array.prototype.slice.call(timeline.querySelectorAll("text.time-tick"));
  const crowded = ticks.slice(1).filter(function (t, k) { return hit(box(ticks[k]), box(t)); });
  document.body.setAttribute("data-check", JSON.stringify({
    labelsOverPoints: over,
    timelineTicks: ticks.map(function (t) { return t.textContent; }),
    stepTicks: Array.prototype.map.call(steps.querySelectorAll("text.ytick"), function (t) { return t.textContent; }),
    crowdedTicks: crowded.length,
    legend: Array.prototype.map.call(document.querySelectorAll("#timeline-legend li"), function (li) {
      return [li.getAttribute("data-lane"), li.textContent, li.querySelector("rect").getAttribute("fill")];
    }),
    lanes: JSON.parse(document.getElementById("report-data").textContent).lanes
  }));
})();
</script>
"""


def _one_format(labels: list[str]) -> bool:
    """Every label the same unit and the same number of decimals ("50 s" beside "100 s", not "50.00 s")."""
    forms = {
        (m[2], len(m[1] or "")) for m in (re.fullmatch(r"\d+(?:\.(\d+))? (s|ms)", t) for t in labels) if m
    }
    return (
        len(labels) >= 2 and all(re.fullmatch(r"\d+(?:\.\d+)? (s|ms)", t) for t in labels) and len(forms) == 1
    )


def test_timeline_ticks_one_format_a_legend_and_no_label_over_a_point(tmp_path, capsys):
    """The timeline's ticks in one format (they were "50.00 s" beside "100 s"), a legend of its
    lanes' colours (and of the restart shading); the step plot's labels clear of its points (its
    "200.0 ms" touched the first one): checked on the layout the browser made."""
    pages = _pages(tmp_path)
    capsys.readouterr()
    for name, page in pages.items():
        checked = page.with_name("checked.html")
        checked.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
        result = browse(checked, tmp_path / f"check-{name}", "--dump-dom")
        assert result.returncode == 0 and console_messages(result.stderr) == [], result.stderr[-2000:]
        found = re.search(r'data-check="([^"]*)"', result.stdout)
        assert found, name
        check = json.loads(found[1].replace("&quot;", '"').replace("&amp;", "&"))
        assert check["labelsOverPoints"] == [], (name, check["labelsOverPoints"])
        assert _one_format(check["timelineTicks"]), (name, check["timelineTicks"])
        assert _one_format(check["stepTicks"]), (name, check["stepTicks"])
        assert check["crowdedTicks"] == 0, (name, check["timelineTicks"])
        lanes = [(lane["title"], lane["title"], lane["color"]) for lane in check["lanes"]]
        legend = [tuple(item) for item in check["legend"]]
        assert legend[: len(lanes)] == lanes, (name, legend)
        assert [key for key, _, _ in legend[len(lanes) :]] == (["restart"] if name == "real" else []), legend
