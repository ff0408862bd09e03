"""The guide page "The report from a trace store" (docs/guide/report-store.md): its commands run
exactly as written, against a chdb store behind ClickHouse's HTTP interface and on a capture file
through chdb; its Collector configuration routes OTLP traces to the ClickHouse exporter's table."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from codegen.report import build
from codegen.report.store import TABLE
from tests.report.store_support import chdb_http, make_store
from tests.report.synthetic import hand_run
from tests.support.doc_blocks import GUIDE, blocks
from tests.support.paths import REPORT_DATA as DATA

PAGE = GUIDE / "report-store.md"


def _workspace(tmp_path: Path) -> Path:
    script = shutil.which("codegen", path=str(Path(sys.executable).parent)) or shutil.which("codegen")
    assert script, "the codegen console script is not installed"
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "codegen").symlink_to(script)
    return tmp_path


def _run(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def _run_on_the_fresh_capture(block: str, tmp_path: Path) -> Path:
    """The page's block ``block`` run in a workspace (returned) whose run/capture.jsonl is the
    shipped fresh capture; it must succeed."""
    work = _workspace(tmp_path)
    (work / "run").mkdir()
    shutil.copy2(DATA / "fresh.jsonl", work / "run" / "capture.jsonl")
    result = _run(blocks(PAGE)[block], work)
    assert result.returncode == 0, result.stderr
    return work


def test_collector_configuration():
    config = yaml.safe_load(blocks(PAGE)["file otel-collector.yaml"])
    exporter = config["exporters"]["clickhouse"]
    assert exporter["traces_table_name"] == TABLE and exporter["create_schema"] is True
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"] and pipeline["exporters"] == ["clickhouse"]
    assert set(config["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}


def test_store_command_runs_as_written(project, tmp_path):
    pytest.importorskip("chdb", reason="the report-store extra (chdb) is not installed")
    spans = hand_run({"service.name": "megatron", "process.pid": 7, "megatron.run_id": "run-1"})
    capture = spans.write(tmp_path / "capture.json")
    other = hand_run({"service.name": "another-job", "process.pid": 8}, offset=100.0)
    store = make_store(tmp_path / "store", [capture, other.write(tmp_path / "other.json")])
    work = _workspace(tmp_path / "work")
    with chdb_http(store) as (url, _):
        result = _run(blocks(PAGE)["report-store"], work, CLICKHOUSE_URL=url)
    assert result.returncode == 0, result.stderr
    assert (work / "report" / "report.txt").read_text() == build(project, [capture]).text
    written = {p.name for p in (work / "report").iterdir()}
    assert written == {"report.txt", "report.html", "trace.perfetto.json"}


def test_engine_chdb_command_runs_as_written(project, tmp_path):
    pytest.importorskip("chdb", reason="the report-store extra (chdb) is not installed")
    work = _run_on_the_fresh_capture("report-engine-chdb", tmp_path)
    assert (work / "report" / "report.txt").read_text() == build(project, [DATA / "fresh.jsonl"]).text


def test_save_store_commands_run_as_written(project, tmp_path):
    """The page's recipe for a chdb store made from captures: the store it saves reports again,
    selected by the service the shipped captures carry, to the file report's text."""
    pytest.importorskip("chdb", reason="the report-store extra (chdb) is not installed")
    work = _run_on_the_fresh_capture("report-save-store", tmp_path)
    want = build(project, [DATA / "fresh.jsonl"]).text
    assert (work / "report" / "report.txt").read_text() == want
    assert (work / "report-again" / "report.txt").read_text() == want
    assert (work / "store").is_dir()
