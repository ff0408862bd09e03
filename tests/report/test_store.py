"""The report from a trace store: the Collector ClickHouse exporter's ``otel_traces`` in chdb.

Each capture is inserted into a table created with the exporter's DDL (``store.EXPORTER_DDL``,
from its ``traces_table.sql`` template) in the exporter's column mapping, then ``codegen report
--store chdb:DIR`` must give the file report exactly: the same text, the same HTML page, and the
same figures to the nanosecond (the ``Report`` compared field by field). A ClickHouse server's
HTTP interface is exercised against an HTTP front of chdb (``chdb_http``): no ClickHouse server
that can create the exporter's schema installs here (Debian's clickhouse-server is 18.16, without
the Map type; PyPI has no server).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from codegen.capture import read_spans
from codegen.cli import EXIT_SOURCE, main
from codegen.report import build, build_from_store, build_with_chdb
from codegen.report.store import EXPORTER_DDL, ChdbConnection, Selection
from tests.report.store_support import chdb_http, make_store
from tests.report.synthetic import figures, hand_run, rank_run, write_capture
from tests.support.otlp_json import simple_run
from tests.support.paths import REPORT_DATA as DATA
from tests.support.paths import SPECS

pytest.importorskip("chdb", reason="the report-store extra (chdb) is not installed")


def _report(*argv: object) -> int:
    """``codegen report --specs SPECS ARGV...``: its exit status."""
    return main(["report", "--specs", str(SPECS), *map(str, argv)])


def _events(out: Path) -> list[str]:
    """The trace's events of the report in ``out``, sorted (their order may differ)."""
    events = json.loads((out / "trace.perfetto.json").read_text())["traceEvents"]
    return sorted(json.dumps(e, sort_keys=True) for e in events)


COMMITTED = {
    "fresh": [DATA / "fresh.jsonl"],
    "resume": [DATA / "resume.jsonl"],
    "fresh+resume": [DATA / "fresh.jsonl", DATA / "resume.jsonl"],
}


def _made(tmp_path: Path) -> dict[str, list[Path]]:
    """Hand-made captures whose figures the accounting tests know, and a synthetic 4-rank one."""
    ranks = []
    for rank in (0, 1):
        spans = rank_run(rank, 10 + rank, step=1.0 + rank * 0.5, fail_after=3)
        simple_run(spans, offset=40.0, first_iteration=2, iterations=4)
        ranks.append(spans.write(tmp_path / f"rank{rank}.json"))
    synthetic = tmp_path / "synthetic.jsonl"
    write_capture(synthetic, ranks=4, iterations=60, save_every=20, eval_every=30)
    return {"two ranks, failed and resumed": ranks, "synthetic 4 ranks": [synthetic]}


def _same_report(project, tmp_path, name, paths):
    store = make_store(tmp_path / "store", paths)
    want = build(project, paths)
    got = build_from_store(project, f"chdb:{store}", Selection())
    try:
        assert figures(got.report) == figures(want.report), name
        assert got.text == want.text
    finally:
        got.close()
    out_files, out_store = tmp_path / "files", tmp_path / "from-store"
    assert _report(*paths, "--out", out_files) == 0
    assert _report("--store", f"chdb:{store}", "--out", out_store) == 0
    for page in ("report.txt", "report.html"):
        assert (out_store / page).read_text() == (out_files / page).read_text(), page
    assert _events(out_store) == _events(out_files)


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_store_report_equals_file_report_on_committed_captures(project, tmp_path, name, capsys):
    _same_report(project, tmp_path, name, COMMITTED[name])


@pytest.mark.parametrize("name", ["two ranks, failed and resumed", "synthetic 4 ranks"])
def test_store_report_equals_file_report_on_made_captures(project, tmp_path, name, capsys):
    _same_report(project, tmp_path, name, _made(tmp_path)[name])


def test_trace_window_from_the_store_equals_the_files(project, tmp_path, capsys):
    (synthetic,) = _made(tmp_path)["synthetic 4 ranks"]
    store = make_store(tmp_path / "store", [synthetic])
    window = ["--trace-ranks", "1,3", "--trace-iterations", "20-25"]
    files, from_store = tmp_path / "files", tmp_path / "from-store"
    assert _report(synthetic, *window, "--out", files) == 0
    assert _report("--store", f"chdb:{store}", *window, "--out", from_store) == 0
    complete = [e for e in map(json.loads, _events(files)) if e["ph"] == "X"]
    assert {e["pid"] for e in complete} == {2, 4} and len(complete) > 6 * 2 * 25
    assert _events(from_store) == _events(files)


def test_engine_chdb_on_files_equals_the_python_reader(project, tmp_path):
    paths = COMMITTED["fresh+resume"]
    got = build_with_chdb(project, paths)
    try:
        assert figures(got.report) == figures(build(project, paths).report)
    finally:
        got.close()


def test_selection_by_time_window_and_service(project, tmp_path, capsys):
    fresh, resume = COMMITTED["fresh+resume"]
    store = make_store(tmp_path / "store", [fresh, resume])
    until = str(min(span.start_ns for span in read_spans(resume)) - 1)
    out = tmp_path / "out"
    argv = ["--store", f"chdb:{store}", "--until", until]
    assert _report(*argv, "--service", "unknown_service:python", "--out", out) == 0
    assert (out / "report.txt").read_text() == build(project, [fresh]).text


def test_engine_chdb_applies_the_selection_to_files(project, tmp_path, capsys):
    """--service/--until on capture files through chdb select as on a store (they were ignored:
    the whole report as if none had been given)."""
    fresh, resume = COMMITTED["fresh+resume"]
    until = str(min(span.start_ns for span in read_spans(resume)) - 1)
    out = tmp_path / "selected"
    argv = [fresh, resume, "--engine", "chdb", "--until", until]
    assert _report(*argv, "--service", "unknown_service:python", "--out", out) == 0
    assert (out / "report.txt").read_text() == build(project, [fresh]).text
    capsys.readouterr()
    err = _fails(tmp_path, capsys, str(fresh), "--engine", "chdb", "--service", "nosuch")
    assert err.startswith("chdb (in memory): error: no spans for table otel_traces, service 'nosuch'; "), err
    assert "services 'unknown_service:python' (199 spans)" in err


@pytest.mark.parametrize(
    "option", [["--service", "nosuch"], ["--run-id", "r"], ["--since", "0"], ["--table", "spans"]]
)
def test_selection_on_files_without_chdb_is_refused(tmp_path, capsys, option):
    """The python reader cannot select: the option is refused (exit 2, nothing written), never ignored."""
    out = tmp_path / "out"
    assert _report(DATA / "fresh.jsonl", *option, "--out", out) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    assert captured.err == (
        f"error: {option[0]}: capture files are read whole; to select among their spans add --engine chdb "
        "(the report-store extra), or name only the run's files\n"
    )


def test_save_store_makes_a_store_the_report_reads_again(project, tmp_path, capsys):
    """--save-store DIR: the captures in a chdb database folder that --store chdb:DIR reports."""
    paths = COMMITTED["fresh+resume"]
    store, first, again = tmp_path / "store", tmp_path / "first", tmp_path / "again"
    assert _report(*paths, "--save-store", store, "--out", first) == 0
    assert _report("--store", f"chdb:{store}", "--out", again) == 0
    want = build(project, paths).text
    assert (first / "report.txt").read_text() == want and (again / "report.txt").read_text() == want
    capsys.readouterr()
    err = _fails(tmp_path, capsys, str(paths[0]), "--save-store", str(store))  # not over a store
    assert err == f"{store}: error: already exists: --save-store makes a new chdb database folder"
    (tmp_path / "bad.json").write_text("{")
    _fails(tmp_path, capsys, str(tmp_path / "bad.json"), "--save-store", str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()  # nothing written


# -- bad input: one line, exit 3, nothing written -----------------------------------------------


CREATED_BY = "(the Collector's ClickHouse exporter creates it: create_schema: true, traces_table_name)"


def _fails(tmp_path, capsys, *argv) -> str:
    out = tmp_path / "out"
    assert _report(*argv, "--out", out) == EXIT_SOURCE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    return err.strip()


def test_missing_table(tmp_path, capsys):
    folder = tmp_path / "empty"
    folder.mkdir()
    err = _fails(tmp_path, capsys, "--store", f"chdb:{folder}")
    assert err == f"chdb:{folder}: error: no table otel_traces {CREATED_BY}"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("Duration UInt64", "column Duration is String, the ClickHouse exporter's schema has UInt64"),
        ("SpanName LowCardinality(String)", "has no column SpanName"),
    ],
)
def test_table_of_another_schema(tmp_path, capsys, change, message):
    folder = tmp_path / "other"
    folder.mkdir()
    ddl = EXPORTER_DDL.format(table="otel_traces")
    if change.startswith("Duration"):
        ddl = ddl.replace("Duration UInt64 CODEC(T64, ZSTD(1))", "Duration String CODEC(ZSTD(1))")
        ddl = ddl.replace("    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,\n", "")
    else:
        ddl = ddl.replace("    SpanName LowCardinality(String) CODEC(ZSTD(1)),\n", "")
        ddl = (
            ddl.replace("ServiceName, SpanName, ", "ServiceName, ")
            .replace(
                "    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8\n",
                "",
            )
            .replace("GRANULARITY 1,\n) ENGINE", "GRANULARITY 1\n) ENGINE")
        )
    connection = ChdbConnection(str(folder))
    try:
        connection.execute(ddl)
    finally:
        connection.close()
    err = _fails(tmp_path, capsys, "--store", f"chdb:{folder}")
    assert err.startswith(f"chdb:{folder}: error: ") and message in err, err


def test_run_id_with_no_spans(tmp_path, capsys):
    store = make_store(tmp_path / "store", COMMITTED["fresh"])
    err = _fails(tmp_path, capsys, "--store", f"chdb:{store}", "--run-id", "no-such-run")
    # what the table holds follows, so that the user need not guess (it stopped at the selection)
    assert err == (
        f"chdb:{store}: error: no spans for table otel_traces, run id 'no-such-run'; otel_traces holds "
        "services 'unknown_service:python' (199 spans); no run ids; spans starting from "
        "2026-12-03T14:35:57.620999 to 2026-12-03T14:37:41.857845 (UTC)"
    )


def test_service_with_no_spans_lists_the_services_and_run_ids(tmp_path, capsys):
    spans = hand_run({"service.name": "job-a", "process.pid": 1, "megatron.run_id": "run-7"})
    store = make_store(tmp_path / "store", [spans.write(tmp_path / "a.json")])
    err = _fails(tmp_path, capsys, "--store", f"chdb:{store}", "--service", "megatron")
    assert err.startswith(
        f"chdb:{store}: error: no spans for table otel_traces, service 'megatron'; otel_traces holds "
        f"services 'job-a' ({len(spans.spans)} spans); run ids 'run-7'; spans starting from "
    ), err


def test_empty_captures_through_chdb_name_the_file(tmp_path, capsys):
    (tmp_path / "empty.json").write_text("")
    err = _fails(tmp_path, capsys, str(tmp_path / "empty.json"), "--engine", "chdb")
    assert err == f"{tmp_path / 'empty.json'}: error: the capture holds no spans"


def test_several_services_without_service(tmp_path, capsys):
    one = hand_run({"service.name": "job-a", "process.pid": 1})
    two = hand_run({"service.name": "job-b", "process.pid": 2}, offset=100.0)
    store = make_store(tmp_path / "store", [one.write(tmp_path / "a.json"), two.write(tmp_path / "b.json")])
    err = _fails(tmp_path, capsys, "--store", f"chdb:{store}")
    assert err == (
        f"chdb:{store}: error: spans of 2 services in otel_traces ('job-a', 'job-b'): report one at a time (--service)"
    )
    out = tmp_path / "b"
    assert _report("--store", f"chdb:{store}", "--service", "job-b", "--out", out) == 0
    assert "2 runs" not in (out / "report.txt").read_text()


def test_unreachable_server(tmp_path, capsys):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    err = _fails(tmp_path, capsys, "--store", f"http://127.0.0.1:{port}")
    assert err.startswith(f"http://127.0.0.1:{port}/default: error: cannot reach the store: "), err


def test_no_chdb_folder(tmp_path, capsys):
    err = _fails(tmp_path, capsys, "--store", f"chdb:{tmp_path / 'nowhere'}")
    assert err == f"chdb:{tmp_path / 'nowhere'}: error: cannot reach the store: no chdb database folder there"


def test_not_a_store_address(tmp_path, capsys):
    err = _fails(tmp_path, capsys, "--store", "ftp://host")
    assert err.startswith("ftp://host: error: not a store address")


def test_files_and_store_together_is_a_usage_error(tmp_path, capsys):
    assert _report(DATA / "fresh.jsonl", "--store", "chdb:x") == 2
    assert "takes capture files or --store ADDRESS" in capsys.readouterr().err


# -- the server's path: ClickHouse's HTTP interface ---------------------------------------------


@pytest.fixture
def served(tmp_path):
    with chdb_http(make_store(tmp_path / "store", COMMITTED["fresh+resume"])) as found:
        yield found


def test_server_path_over_http(project, tmp_path, served, capsys):
    url, seen = served
    out = tmp_path / "out"
    assert _report("--store", url, "--out", out) == 0
    assert (out / "report.txt").read_text() == build(project, COMMITTED["fresh+resume"]).text
    # the same query text as on chdb, and no query that returns spans but the trace's window
    assert any("ASOF LEFT JOIN" in sql for sql in seen)
    assert sum("LIMIT" in sql for sql in seen) == 1


def test_server_path_refused_query(tmp_path, served, capsys):
    url, _ = served
    err = _fails(tmp_path, capsys, "--store", url, "--table", "nope")
    assert err == f"{url}/default: error: no table nope {CREATED_BY}"
