"""The store and how it is reached: the exporter's table (its DDL, the columns read), a ClickHouse
server over HTTP or chdb in process, the run's selection; the one error (``StoreError``)."""

from __future__ import annotations

import importlib
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from codegen.capture import CaptureError
from codegen.capture.console import iso_nanos
from codegen.diagnostics import install_command

TABLE = "otel_traces"
# the columns the queries read, with the types the exporter creates them with
COLUMNS: dict[str, tuple[str, ...]] = {
    "Timestamp": ("DateTime64(9)",),
    "TraceId": ("String",),
    "SpanId": ("String",),
    "ParentSpanId": ("String",),
    "SpanName": ("LowCardinality(String)",),
    "ServiceName": ("LowCardinality(String)",),
    "ResourceAttributes": ("Map(LowCardinality(String), String)",),
    "SpanAttributes": ("Map(LowCardinality(String), String)",),
    "Duration": ("UInt64", "Int64"),
    "StatusCode": ("LowCardinality(String)",),
    "Links.TraceId": ("Array(String)",),
    "Links.SpanId": ("Array(String)",),
}
# CREATE TABLE of the exporter's template above, its placeholders filled: database and table
# `otel_traces`, no cluster, ENGINE MergeTree(), no TTL, the bloom-filter indexes
EXPORTER_DDL = """CREATE TABLE IF NOT EXISTS {table} (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    ResourceAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(ResourceAttributes, 'Array(Tuple(String, String))')),
    SpanAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(SpanAttributes, 'Array(Tuple(String, String))')),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,
    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1"""
WINDOW_ROWS = 2_000_000  # spans a Perfetto window may fetch at most (the window keeps 1,000,000)


class StoreError(CaptureError):
    """The store cannot be read, or holds nothing to report: one line, exit 3."""


class Connection(Protocol):
    where: str  # how the error lines name the store

    def rows(self, sql: str) -> list[list[Any]]: ...

    def close(self) -> None: ...


class HttpConnection:
    """A ClickHouse server's HTTP interface: each query a POST, the answer JSONCompact."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        self.database = query.pop("database", "") or parts.path.strip("/") or "default"
        self.user, self.password = parts.username, parts.password
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        query.update(database=self.database, default_format="JSONCompact")
        query["output_format_json_quote_64bit_integers"] = "0"
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, "/", urllib.parse.urlencode(query), ""))
        self.where = urllib.parse.urlunsplit((parts.scheme, netloc, "/" + self.database, "", ""))
        self.timeout = timeout

    def rows(self, sql: str) -> list[list[Any]]:
        request = urllib.request.Request(self.url, data=sql.encode("utf-8"), method="POST")
        if self.user:
            request.add_header("X-ClickHouse-User", urllib.parse.unquote(self.user))
        if self.password:
            request.add_header("X-ClickHouse-Key", urllib.parse.unquote(self.password))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace").strip().splitlines()
            raise StoreError(
                f"{self.where}: error: the store refused a query: {text[0] if text else exc}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise StoreError(f"{self.where}: error: cannot reach the store: {reason}") from None
        return _data(body, self.where)

    def close(self) -> None:
        """Nothing held between queries."""


class ChdbConnection:
    """chdb, ClickHouse in this process, on a database folder (``chdb:PATH``) or in memory."""

    def __init__(self, path: str | None = None) -> None:
        try:  # typed as Any: chdb has no annotations, and the lint environment does not install it
            session: Any = importlib.import_module("chdb.session")
        except ImportError:
            raise StoreError(
                f"error: chdb is not installed (the report-store extra): {install_command('report-store')}"
            ) from None
        if path is not None and not Path(path).is_dir():
            raise StoreError(f"chdb:{path}: error: cannot reach the store: no chdb database folder there")
        self.where = f"chdb:{path}" if path else "chdb (in memory)"
        self.session = session.Session(path) if path else session.Session()

    def rows(self, sql: str) -> list[list[Any]]:
        try:
            answer = self.session.query(sql, "JSONCompact")
        except Exception as exc:  # noqa: BLE001  # chdb raises its own error types for bad SQL
            first = str(exc).strip().splitlines()
            raise StoreError(
                f"{self.where}: error: the store refused a query: {first[0] if first else exc}"
            ) from None
        return _data(answer.bytes(), self.where)

    def execute(self, sql: str) -> None:
        self.session.query(sql)

    def close(self) -> None:
        self.session.close()


def _data(body: bytes, where: str) -> list[list[Any]]:
    if not body.strip():
        return []
    try:
        data = json.loads(body)["data"]
    except (ValueError, KeyError, TypeError):
        raise StoreError(f"{where}: error: the store's answer is not ClickHouse JSONCompact") from None
    return list(data)


def connect(address: str) -> Connection:
    """``http(s)://host:port[/database]`` (a ClickHouse server) or ``chdb:PATH`` (a chdb folder)."""
    if address.startswith("chdb:"):
        return ChdbConnection(address[len("chdb:") :])
    if address.startswith(("http://", "https://")):
        return HttpConnection(address)
    raise StoreError(
        f"{address}: error: not a store address (http://host:8123[/database] for a ClickHouse server, "
        "chdb:PATH for a chdb database folder)"
    )


@dataclass(frozen=True)
class Selection:
    """Which spans of the table are the run: a service, a run id, a time window (each optional)."""

    table: str = TABLE
    service: str | None = None
    run_id: str | None = None
    since: int | None = None  # ns since the epoch
    until: int | None = None

    def options(self) -> list[str]:
        """The command-line options that made this selection (those given)."""
        given = {
            "--table": self.table != TABLE,
            "--service": self.service is not None,
            "--run-id": self.run_id is not None,
            "--since": self.since is not None,
            "--until": self.until is not None,
        }
        return [option for option, present in given.items() if present]

    def describe(self) -> str:
        what = [f"table {self.table}"]
        if self.service is not None:
            what.append(f"service {self.service!r}")
        if self.run_id is not None:
            what.append(f"run id {self.run_id!r}")
        if self.since is not None or self.until is not None:
            what.append("the time window given")
        return ", ".join(what)


def parse_time(text: str) -> int:
    """ISO 8601 (UTC when no offset) or integer ns since the epoch -> ns; ValueError otherwise."""
    return int(text) if text.isdigit() else iso_nanos(text)


def sql_string(value: str) -> str:
    """A ClickHouse string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ident(name: str) -> str:
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))
