"""``codegen report``: goodput, badput and step times from a run's exported spans, and a timeline.

parse (capture files -> ``parse.Capture``), compute (``compute.account`` -> ``compute.Report``) and
render (text, Perfetto JSON, HTML) are separate modules; this one ties them together. What counts
where comes from the specs (``taxonomy.Taxonomy``), never from a list of span names here.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from codegen.atomic import staged
from codegen.capture import CaptureError
from codegen.report.compute import Report, account
from codegen.report.parse import Capture, Window, read
from codegen.report.parse import close as close_capture
from codegen.report.render_html import render_html
from codegen.report.render_perfetto import write_perfetto
from codegen.report.render_text import render_text
from codegen.report.store import (
    ChdbConnection,
    Connection,
    Selection,
    StoreError,
    connect,
    load_captures,
    read_store,
    read_window,
)
from codegen.report.taxonomy import Taxonomy, TaxonomyError
from codegen.report.trace_window import choose
from codegen.spec.model import Project

__all__ = [
    "CaptureError",
    "Outputs",
    "Report",
    "Selection",
    "StoreError",
    "TaxonomyError",
    "build",
    "build_from_store",
    "build_with_chdb",
    "write_outputs",
]

PERFETTO_FILE = "trace.perfetto.json"
HTML_FILE = "report.html"
TEXT_FILE = "report.txt"


@dataclass(frozen=True)
class Outputs:
    capture: Capture
    taxonomy: Taxonomy
    report: Report
    text: str
    spans_in: Callable[[Window], Capture]  # every span of a window, for the Perfetto trace
    close: Callable[[], None] = lambda: None  # the store's connection, when done


def build(project: Project, paths: Sequence[Path], jobs: int | None = None) -> Outputs:
    """Read the captures and account them; raise ``CaptureError`` / ``TaxonomyError`` on bad input.
    ``jobs``: worker processes reading several files (default: one per CPU for a large input)."""
    taxonomy = Taxonomy.from_project(project)
    capture = read(paths, taxonomy, jobs)
    report = account(capture, taxonomy)
    spans_in = partial(read, list(paths), taxonomy, jobs)  # called with the window
    return Outputs(capture, taxonomy, report, render_text(report), spans_in)


def build_from_store(project: Project, address: str, selection: Selection) -> Outputs:
    """The report of the run ``selection`` picks out of the store at ``address`` (a ClickHouse
    server's HTTP URL or ``chdb:PATH``); raise ``StoreError`` (a ``CaptureError``) on bad input."""
    taxonomy = Taxonomy.from_project(project)
    connection = connect(address)
    try:
        return _from_connection(connection, selection, taxonomy)
    except BaseException:
        connection.close()
        raise


def build_with_chdb(
    project: Project, paths: Sequence[Path], selection: Selection | None = None, save: Path | None = None
) -> Outputs:
    """The report of capture files through the store's path: loaded into the exporter's schema in
    chdb, then the same queries as on a server (the ``report-store`` extra), on the spans
    ``selection`` picks. In memory, or with ``save`` in a new chdb database folder there, which
    ``--store chdb:PATH`` reads later (removed again when the load or the report fails)."""
    taxonomy = Taxonomy.from_project(project)
    if save is not None:
        if save.exists() and not (save.is_dir() and not any(save.iterdir())):
            raise StoreError(f"{save}: error: already exists: --save-store makes a new chdb database folder")
        save.mkdir(parents=True, exist_ok=True)
    try:
        connection = ChdbConnection(str(save) if save is not None else None)
    except BaseException:
        _remove_store(save)
        raise
    try:
        with tempfile.TemporaryDirectory(prefix="codegen-report-") as tmp:
            if not load_captures(connection, paths, Path(tmp), (selection or Selection()).table):
                close_capture(Capture(), paths)  # no spans: the error names the files
        return _from_connection(connection, selection or Selection(), taxonomy)
    except BaseException:
        connection.close()
        _remove_store(save)
        raise


def _remove_store(save: Path | None) -> None:
    if save is not None:
        shutil.rmtree(save, ignore_errors=True)


def _from_connection(connection: Connection, selection: Selection, taxonomy: Taxonomy) -> Outputs:
    capture = read_store(connection, selection, taxonomy)
    report = account(capture, taxonomy)
    spans_in = partial(read_window, connection, selection, taxonomy, first=capture)
    return Outputs(capture, taxonomy, report, render_text(report), spans_in, connection.close)


def write_outputs(outputs: Outputs, out: Path, title: str, ranks: Collection[int] | None = None,
                  iterations: tuple[int, int] | None = None) -> tuple[list[Path], str]:  # fmt: skip
    """Write the text summary, the Perfetto trace (of a window: ``trace_window.choose``) and the
    HTML page into ``out``; return their paths and a line saying the trace's window."""
    chosen = choose(outputs.capture, ranks, iterations)
    spans = outputs.spans_in(chosen.window)  # read before anything is written: errors stop it all
    with staged(out) as files:
        with files.open(PERFETTO_FILE) as raw, io.TextIOWrapper(raw, encoding="utf-8") as trace:
            write_perfetto(spans, outputs.taxonomy, trace)
        files.write(TEXT_FILE, outputs.text)
        files.write(HTML_FILE, render_html(outputs.report, title))
    return [out / TEXT_FILE, out / PERFETTO_FILE, out / HTML_FILE], chosen.note
