"""``codegen report``: goodput, badput and step times from a run's exported spans, and a timeline.

parse (capture files -> ``parse.Capture``), compute (``compute.account`` -> ``compute.Report``) and
render (text, Perfetto JSON, HTML) are separate modules; this one ties them together. What counts
where comes from the specs (``taxonomy.Taxonomy``), never from a list of span names here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from codegen.capture import CaptureError
from codegen.report.compute import Report, account
from codegen.report.parse import Capture, read
from codegen.report.render_html import render_html
from codegen.report.render_perfetto import write_perfetto
from codegen.report.render_text import render_text
from codegen.report.taxonomy import Taxonomy, TaxonomyError
from codegen.spec.model import Project

__all__ = ["CaptureError", "Outputs", "Report", "TaxonomyError", "build", "write_outputs"]

PERFETTO_FILE = "trace.perfetto.json"
HTML_FILE = "report.html"
TEXT_FILE = "report.txt"


@dataclass(frozen=True)
class Outputs:
    capture: Capture
    taxonomy: Taxonomy
    report: Report
    text: str


def build(project: Project, paths: Sequence[Path], jobs: int | None = None) -> Outputs:
    """Read the captures and account them; raise ``CaptureError`` / ``TaxonomyError`` on bad input.
    ``jobs``: worker processes reading several files (default: one per CPU for a large input)."""
    taxonomy = Taxonomy.from_project(project)
    capture = read(paths, taxonomy, jobs)
    report = account(capture, taxonomy)
    return Outputs(capture, taxonomy, report, render_text(report))


def write_outputs(outputs: Outputs, out: Path, title: str) -> list[Path]:
    """Write the text summary, the Perfetto trace and the HTML page into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    text = out / TEXT_FILE
    html = out / HTML_FILE
    perfetto = out / PERFETTO_FILE
    write_perfetto(outputs.capture, outputs.taxonomy, perfetto)
    for path, content in ((text, outputs.text), (html, render_html(outputs.report, title))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(content, encoding="utf-8")
        tmp.replace(path)
    return [text, perfetto, html]
