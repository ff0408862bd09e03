"""What ``codegen report --out`` writes: the text, the Perfetto trace and the self-contained page."""

from __future__ import annotations

import json
import re

from tests.report.synthetic import hand_run, rank_run
from tests.support.cli import codegen
from tests.support.otlp_json import Spans
from tests.support.paths import SPECS


def _two_ranks(tmp_path):
    return [rank_run(r, 10 + r, step=1.0 + r * 0.5).write(tmp_path / f"rank{r}.json") for r in (0, 1)]


def test_cli_writes_text_perfetto_and_html(tmp_path, capsys):
    paths = _two_ranks(tmp_path)
    out = tmp_path / "out"
    assert codegen("report", "--specs", SPECS, *paths, "--out", out) == 0
    printed = capsys.readouterr().out
    assert "Goodput:" in printed and f"wrote {out / 'report.html'}" in printed
    assert (out / "report.txt").read_text() in printed
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.txt", "trace.perfetto.json"]


def test_perfetto_trace_one_process_per_rank_and_links_as_flows(tmp_path, capsys):
    paths = _two_ranks(tmp_path)
    out = tmp_path / "out"
    assert codegen("report", "--specs", SPECS, *paths, "--out", out) == 0
    capsys.readouterr()
    events = json.loads((out / "trace.perfetto.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(names.values()) == ["run 0: rank 0 (pid 10)", "run 0: rank 1 (pid 11)"]
    threads = [e for e in events if e.get("name") == "thread_name"]
    assert {(e["pid"], e["args"]["name"]) for e in threads} == {(1, "main"), (2, "main")}
    complete = [e for e in events if e["ph"] == "X"]
    written = sum(len(json.loads(p.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]) for p in paths)
    assert len(complete) == written
    iterations = [e for e in complete if e["name"] == "megatron.train.iteration"]
    assert {e["args"]["megatron.iteration"] for e in iterations} == {0, 1, 2, 3}
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in complete)
    assert {e["cat"] for e in iterations} == {"step"}


def test_perfetto_links_become_flow_pairs(tmp_path, capsys):
    spans = Spans()
    startup = spans.add("megatron.startup", 0, 1)
    first = spans.add("megatron.train", 1, 2, iteration=0, links=[startup])
    spans.add("megatron.train", 2, 3, iteration=2, links=[first])
    path = spans.write(tmp_path / "c.json")
    out = tmp_path / "out"
    assert codegen("report", "--specs", SPECS, path, "--out", out) == 0
    capsys.readouterr()
    events = json.loads((out / "trace.perfetto.json").read_text())["traceEvents"]
    starts = [e for e in events if e["ph"] == "s"]
    finishes = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(finishes) == 2
    assert {e["id"] for e in starts} == {e["id"] for e in finishes}
    # each flow starts inside the linked span and ends at the linking span's start
    assert sorted(e["ts"] for e in finishes) == [1_000_000.0, 2_000_000.0]
    assert sorted(e["ts"] for e in starts) == [999_999.0, 1_999_999.0]  # 1 us before the end


def test_html_is_self_contained(tmp_path, capsys):
    paths = _two_ranks(tmp_path)
    out = tmp_path / "out"
    assert codegen("report", "--specs", SPECS, *paths, "--out", out) == 0
    capsys.readouterr()
    page = (out / "report.html").read_text()
    # no external resource: nothing loaded from a URL, and the CSP forbids it anyway
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "default-src 'none'" in page
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL)
    data = json.loads(found.group(1))
    assert data["categories"][0]["key"] == "goodput"
    assert abs(sum(c["share"] for c in data["categories"]) - 1) < 1e-9
    assert len(data["heat"]["rows"]) == 2 and data["heat"]["columns"]
    assert len(data["steps"]) == 4
    for figure in ("breakdown", "timeline", "steps", "heat"):
        assert f'<svg id="{figure}"' in page


def test_html_escapes_names(tmp_path, capsys):
    spans = hand_run()
    spans.add("</script><b>x", 5, 6)
    path = spans.write(tmp_path / "c.json")
    out = tmp_path / "out"
    assert codegen("report", "--specs", SPECS, path, "--out", out, "--title", "<i>t</i>") == 0
    capsys.readouterr()
    page = (out / "report.html").read_text()
    assert "<i>t</i>" not in page and "&lt;i&gt;t&lt;/i&gt;" in page
    assert "</script><b>" not in page


def test_text_names_the_slowest_rank_and_the_spread(tmp_path, capsys):
    paths = _two_ranks(tmp_path)  # rank 1 takes 1.5 s a step, rank 0 1 s
    assert codegen("report", "--specs", SPECS, *paths) == 0
    out = capsys.readouterr().out
    assert "slowest rank most often: rank 1 (pid 11) (3 of 3 iterations after the first)" in out
    assert "largest spread 500.0 ms at iteration 1" in out
