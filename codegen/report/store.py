"""The report from a trace store: the OpenTelemetry Collector's ClickHouse exporter's ``otel_traces``.

The store computes the reductions the file reader makes while reading (``parse``): per process
its start and end; the spans the accounting reads one by one (those that set a category, the
intervals, saves, loads, the first iteration: tens a run per process); per process and iteration
one row (the step time) and the sums of its phases and of the logging after it; the count of
spans by name. Only these aggregates leave the store; they become the same ``parse.Capture`` the
files give, and the rest (runs, the accounting, the pictures) is the one code for both.

The queries are the same text on a ClickHouse server (HTTP interface, ``http://host:8123``) and on
chdb, ClickHouse in process (``chdb:PATH``, the ``report-store`` extra), which is also how local
captures are reported through the store's path (``--engine chdb``, ``load_captures``).

Schema: the exporter's ``traces_table.sql`` template (non-full-text-search variant) pinned at
opentelemetry-collector-contrib commit 2bf6b9e1f8c8716ab54eaac1635e56b4d0649900
(exporter/clickhouseexporter/internal/sqltemplates/; the Go module
github.com/open-telemetry/opentelemetry-collector-contrib/exporter/clickhouseexporter's newest
release in the module index when written: v0.165.1). Its
column mapping: ``Timestamp`` the span's start, ``Duration`` end - start in ns, ids in hex
(``ParentSpanId`` empty for a root), ``StatusCode`` ``Unset``/``Ok``/``Error``, every attribute
value as a string. The columns read are checked before any figure (:data:`COLUMNS`); the older
exporter's ``Duration Int64`` is accepted too.
"""

from __future__ import annotations

import datetime
import importlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from codegen.capture import CaptureError
from codegen.diagnostics import install_command
from codegen.report.parse import (
    FIRST,
    LOGGING,
    MARK,
    PHASE,
    RANK_KEYS,
    RUN_KEYS,
    Capture,
    Link,
    Process,
    Window,
    _kinds,
    close,
    process_key,
)
from codegen.report.taxonomy import Taxonomy

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
    if text.isdigit():
        return int(text)
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def sql_string(value: str) -> str:
    """A ClickHouse string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ident(name: str) -> str:
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


# -- the queries ---------------------------------------------------------------------------------

# a process: its run id, rank, host and pid (as parse._process keys it)
_RANK = (
    "multiIf("
    + ", ".join(
        f"mapContains(ResourceAttributes, {sql_string(k)}), ResourceAttributes[{sql_string(k)}]"
        for k in RANK_KEYS
    )
    + ", '')"
)
KEY = (
    f"tuple(ResourceAttributes[{sql_string(RUN_KEYS[0])}], ResourceAttributes[{sql_string(RUN_KEYS[1])}], {_RANK}, "
    "ResourceAttributes['host.name'], ResourceAttributes['process.pid'])"
)
START = "toUnixTimestamp64Nano(Timestamp)"
ITERATION_OF = "ifNull(toInt64OrNull(SpanAttributes[{key}]), -1)"


def _where(selection: Selection, service: bool = True) -> str:
    terms = ["1"]
    if service and selection.service is not None:
        terms.append(f"ServiceName = {sql_string(selection.service)}")
    if selection.run_id is not None:
        run = sql_string(selection.run_id)
        terms.append(" OR ".join(f"ResourceAttributes[{sql_string(k)}] = {run}" for k in RUN_KEYS).join("()"))
    if selection.since is not None:
        terms.append(f"{START} >= {int(selection.since)}")
    if selection.until is not None:
        terms.append(f"{START} <= {int(selection.until)}")
    return " AND ".join(terms)


def _names(names: Iterable[str]) -> str:
    return "(" + ", ".join(sql_string(n) for n in sorted(names)) + ")" if names else "('')"


def queries(selection: Selection, taxonomy: Taxonomy) -> dict[str, str]:
    """The report's queries on the store, by name (the text that runs on a server and on chdb)."""
    kinds = _kinds(taxonomy)
    marks = [n for n, k in kinds.items() if k & MARK]
    phases = [n for n, k in kinds.items() if k & PHASE]
    logging = [n for n, k in kinds.items() if k & LOGGING]
    table = _ident(selection.table)
    where = _where(selection)
    iteration = sql_string(taxonomy.iteration)
    number = ITERATION_OF.format(key=sql_string(taxonomy.iteration_key))
    return {
        "services": f"SELECT ServiceName, count() FROM {table} WHERE {_where(selection, False)} "
        "GROUP BY ServiceName ORDER BY ServiceName",
        "names": f"SELECT SpanName, count() FROM {table} WHERE {where} GROUP BY SpanName ORDER BY SpanName",
        "processes": f"SELECT {KEY} AS k, any(ResourceAttributes), min({START}), max({START} + Duration) "
        f"FROM {table} WHERE {where} GROUP BY k",
        "marks": f"SELECT {KEY}, SpanName, {START} AS s, s + Duration, SpanId, ParentSpanId, {number}, "
        f"ifNull(toInt64OrNull(SpanAttributes['thread.id']), 0), StatusCode = 'Error' "
        f"FROM {table} WHERE {where} AND SpanName IN {_names(marks)} ORDER BY s, SpanName",
        "steps": f"SELECT {KEY}, {number}, {START} AS s, Duration, SpanId, StatusCode = 'Error' "
        f"FROM {table} WHERE {where} AND SpanName = {iteration} ORDER BY s",
        "phases": f"SELECT {KEY} AS k, ParentSpanId, SpanName, sum(Duration) FROM {table} "
        f"WHERE {where} AND SpanName IN {_names(phases)} AND ParentSpanId != '' "
        "GROUP BY k, ParentSpanId, SpanName",
        # the spans after a step (logging): summed per iteration, the one of the same process that
        # started last before them
        "logging": f"SELECT l.k, it.s, sum(l.d) FROM "
        f"(SELECT {KEY} AS k, {START} AS s, Duration AS d FROM {table} "
        f"WHERE {where} AND SpanName IN {_names(logging)}) AS l "
        f"ASOF LEFT JOIN (SELECT {KEY} AS k, {START} AS s FROM {table} "
        f"WHERE {where} AND SpanName = {iteration}) AS it "
        "ON l.k = it.k AND l.s >= it.s GROUP BY l.k, it.s",
    }


def what_is_there(connection: Connection, table: str = TABLE) -> str:
    """What the table holds, for a selection that found nothing: its services, run ids and the
    time range of its spans (the first few of each)."""
    ident = _ident(table)
    services = connection.rows(
        f"SELECT ServiceName, count() AS n FROM {ident} GROUP BY ServiceName ORDER BY n DESC, ServiceName LIMIT 6"
    )
    if not services:
        return f"{table} holds no spans"
    runs = " OR ".join(f"ResourceAttributes[{sql_string(k)}] != ''" for k in RUN_KEYS)
    run = f"if(ResourceAttributes[{sql_string(RUN_KEYS[0])}] != '', ResourceAttributes[{sql_string(RUN_KEYS[0])}], ResourceAttributes[{sql_string(RUN_KEYS[1])}])"
    run_ids = connection.rows(f"SELECT DISTINCT {run} AS r FROM {ident} WHERE {runs} ORDER BY r LIMIT 6")
    ((first, last),) = connection.rows(f"SELECT min({START}), max({START}) FROM {ident}")

    def listed(values: list[str]) -> str:
        return ", ".join(values[:5]) + (", ..." if len(values) > 5 else "")

    held = [f"services {listed([f'{str(s)!r} ({int(n):,} spans)' for s, n in services])}"]
    held.append(f"run ids {listed([repr(str(r)) for (r,) in run_ids])}" if run_ids else "no run ids")
    held.append(f"spans starting from {_iso(int(first))} to {_iso(int(last))} (UTC)")
    return f"{table} holds " + "; ".join(held)


def _iso(ns: int) -> str:
    """ns since the epoch as --since/--until take it (ISO 8601, UTC), to the microsecond."""
    return (datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=ns // 1000)).isoformat()


def check_schema(connection: Connection, table: str = TABLE) -> None:
    """The table exists and has the exporter's columns (of its types); else one StoreError line."""
    database, _, name = table.rpartition(".")
    db = sql_string(database) if database else "currentDatabase()"
    found = connection.rows(
        f"SELECT name, type FROM system.columns WHERE database = {db} AND table = {sql_string(name)}"
    )
    where = connection.where
    if not found:
        raise StoreError(
            f"{where}: error: no table {table} (the Collector's ClickHouse exporter creates it: "
            "create_schema: true, traces_table_name)"
        )
    types = {str(n): str(t) for n, t in found}
    for column, wanted in COLUMNS.items():
        have = types.get(column)
        if have is None:
            raise StoreError(
                f"{where}: error: table {table} has no column {column}: not the ClickHouse exporter's "
                "otel_traces schema"
            )
        if have not in wanted:
            raise StoreError(
                f"{where}: error: table {table}: column {column} is {have}, the ClickHouse exporter's "
                f"schema has {wanted[0]}"
            )


def _resource(raw: dict[str, str]) -> dict[str, Any]:
    """The exporter stores every attribute as a string: integers back to integers."""
    return {k: int(v) if v.lstrip("-").isdigit() and v not in ("", "-") else v for k, v in raw.items()}


def read_store(connection: Connection, selection: Selection, taxonomy: Taxonomy) -> Capture:
    """The capture of the run ``selection`` picks out of the store: its aggregates only."""
    check_schema(connection, selection.table)
    sql = queries(selection, taxonomy)
    where = connection.where
    services = connection.rows(sql["services"])
    if selection.service is None and len(services) > 1:
        names = ", ".join(repr(str(s)) for s, _ in services[:5])
        raise StoreError(
            f"{where}: error: spans of {len(services)} services in {selection.table} ({names}"
            f"{', ...' if len(services) > 5 else ''}): report one at a time (--service)"
        )
    counts = connection.rows(sql["names"])
    if not counts:
        raise StoreError(
            f"{where}: error: no spans for {selection.describe()}; {what_is_there(connection, selection.table)}"
        )
    capture = Capture()
    source = f"{where} ({selection.table})"
    for name, count in counts:
        capture.total += int(count)
        if str(name) not in taxonomy.names:
            capture.unknown[str(name)] = (int(count), source)
    processes: dict[tuple[str, ...], Process] = {}
    for key, resource_raw, start, end in connection.rows(sql["processes"]):
        resource = _resource(dict(resource_raw))
        pkey = process_key(resource, source)
        process = Process(len(capture.processes), pkey, resource, source, pkey[1], int(start), int(end))
        capture.processes.append(process)
        processes[tuple(key)] = process
        for job_key in ("job_uuid", "service.name"):
            if resource.get(job_key) is not None:
                seen = capture.job.setdefault(job_key, (resource[job_key], source))
                if seen[0] != resource[job_key]:
                    raise StoreError(
                        f"{where}: error: spans of two jobs mixed: {job_key} is {resource[job_key]!r} "
                        f"and {seen[0]!r}; narrow the selection (--run-id, --since/--until)"
                    )
    kinds = _kinds(taxonomy)
    for key, name, start, end, span_id, parent, number, thread, error in connection.rows(sql["marks"]):
        p = processes[tuple(key)].index
        _add_span(
            capture,
            p,
            str(name),
            int(start),
            int(end),
            str(span_id),
            str(parent),
            int(number),
            int(thread),
            bool(error),
        )
        if kinds.get(str(name), 0) & FIRST:
            capture.steps.aliases.append((p, _hex(span_id), _hex(parent)))
    steps = capture.steps
    for key, number, start, duration, span_id, error in connection.rows(sql["steps"]):
        steps.add(
            processes[tuple(key)].index, int(number), int(start), int(duration), _hex(span_id), bool(error)
        )
    for key, parent, name, ns in connection.rows(sql["phases"]):
        steps.orphans.append((processes[tuple(key)].index, _hex(parent), str(name), int(ns)))
    for key, start, ns in connection.rows(sql["logging"]):
        if int(start) > 0:  # logging before any iteration counts nowhere
            steps.log_process.append(processes[tuple(key)].index)
            steps.log_start.append(int(start))
            steps.log_duration.append(int(ns))
    close(capture)
    return capture


def _hex(value: Any) -> int:
    text = str(value)
    try:
        return int(text[-16:], 16) if text else 0
    except ValueError:
        raise StoreError(f"error: span id {text!r} in the store is not hexadecimal") from None


def _add_span(capture: Capture, p: int, name: str, start: int, end: int, span_id: str, parent: str,
              number: int, thread: int, error: bool) -> None:  # fmt: skip
    capture.name.append(capture.name_id(name))
    capture.process.append(p)
    capture.start.append(start)
    capture.end.append(end)
    capture.span_id.append(_hex(span_id))
    capture.parent_id.append(_hex(parent))
    capture.iteration.append(number)
    capture.thread.append(thread)
    capture.error.append(1 if error else 0)


def read_window(connection: Connection, selection: Selection, taxonomy: Taxonomy, window: Window,
                first: Capture) -> Capture:  # fmt: skip
    """Every span of ``window`` (process keys of ``first``, the capture ``read_store`` made), for
    the Perfetto trace: the one query that returns spans, bounded by the window."""
    capture = Capture()
    if not window.ranges:
        capture.processes = first.processes
        capture.runs = first.runs
        return capture
    lo = min(a for a, _ in window.ranges.values())
    hi = max(b for _, b in window.ranges.values())
    table = _ident(selection.table)
    number = ITERATION_OF.format(key=sql_string(taxonomy.iteration_key))
    only = ""
    if len(window.ranges) < len(first.processes):  # some ranks: only theirs
        keys = [_sql_key(p) for p in first.processes if p.key in window.ranges]
        only = f" AND {KEY} IN (" + ", ".join("(" + ", ".join(map(sql_string, k)) + ")" for k in keys) + ")"
    rows = connection.rows(
        f"SELECT {KEY}, SpanName, {START} AS s, s + Duration AS e, SpanId, ParentSpanId, {number}, "
        f"ifNull(toInt64OrNull(SpanAttributes['thread.id']), 0), StatusCode = 'Error', TraceId, "
        f"`Links.TraceId`, `Links.SpanId` FROM {table} WHERE {_where(selection)}{only} AND s <= {hi} AND e >= {lo} "
        f"ORDER BY s LIMIT {WINDOW_ROWS}"
    )
    by_key = {p.key: p for p in first.processes}
    keyed: dict[tuple[str, ...], Process | None] = {}
    for p in first.processes:
        keyed[_sql_key(p)] = p
    capture.processes = [
        Process(p.index, p.key, p.resource, p.source, p.rank, p.start, p.end, p.run) for p in first.processes
    ]
    capture.runs = first.runs
    for (
        key,
        name,
        start,
        end,
        span_id,
        parent,
        number_,
        thread,
        error,
        _trace,
        link_traces,
        link_spans,
    ) in rows:
        process = keyed.get(tuple(key))
        if process is None or process.key not in by_key:
            continue
        a, b = window.ranges.get(process.key, (0, -1))
        if int(end) < a or int(start) > b:
            continue
        index = len(capture.name)
        _add_span(
            capture,
            process.index,
            str(name),
            int(start),
            int(end),
            str(span_id),
            str(parent),
            int(number_),
            int(thread),
            bool(error),
        )
        for trace_id, linked in zip(link_traces, link_spans):
            capture.links.append(Link(index, str(trace_id), _hex(linked)))
    capture.total = len(capture.name)
    return capture


def _sql_key(process: Process) -> tuple[str, ...]:
    r = process.resource

    def text(value: Any) -> str:
        return "" if value is None else str(value)

    rank = next((text(r[k]) for k in RANK_KEYS if k in r), "")
    return (
        text(r.get(RUN_KEYS[0])),
        text(r.get(RUN_KEYS[1])),
        rank,
        text(r.get("host.name")),
        text(r.get("process.pid")),
    )


# -- local captures into the exporter's schema (chdb) -----------------------------------------------


def _attr_text(value: Any) -> str:
    """An attribute value as the exporter stores it (pcommon Value.AsString)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value != int(value) or abs(value) >= 1e21 else str(int(value))
    return json.dumps(value, separators=(",", ":"))


LOAD_COLUMNS = (
    "start Int64, TraceId String, SpanId String, ParentSpanId String, SpanName String, SpanKind String, "
    "ServiceName String, ResourceAttributes Map(String, String), ScopeName String, ScopeVersion String, "
    "SpanAttributes Map(String, String), Duration UInt64, StatusCode String, StatusMessage String, "
    "LinkTraceIds Array(String), LinkSpanIds Array(String)"
)
KIND_NAMES = {"UNSPECIFIED": "Unspecified", "INTERNAL": "Internal", "SERVER": "Server", "CLIENT": "Client",
              "PRODUCER": "Producer", "CONSUMER": "Consumer"}  # fmt: skip
STATUS_NAMES = {"UNSET": "Unset", "OK": "Ok", "ERROR": "Error"}


def exporter_rows(paths: Sequence[Path]) -> Iterable[str]:
    """The spans of capture files as JSONEachRow lines in the exporter's column mapping."""
    from codegen.capture import CapturedSpan, iter_records

    resource_text: tuple[int, str, str] | None = None
    for span in iter_records(paths):
        if not isinstance(span, CapturedSpan):
            continue
        if resource_text is None or resource_text[0] != id(span.resource):
            service = span.resource.get("service.name")
            resource_text = (
                id(span.resource),
                json.dumps({k: _attr_text(v) for k, v in span.resource.items()}),
                json.dumps("" if service is None else _attr_text(service)),
            )
        attributes = {k: _attr_text(v) for k, v in (span.attributes or {}).items()}
        yield (
            f'{{"start":{span.start_ns},"TraceId":{json.dumps(span.trace_id or "")},'
            f'"SpanId":{json.dumps(span.span_id or "")},"ParentSpanId":{json.dumps(span.parent_id or "")},'
            f'"SpanName":{json.dumps(span.name)},"SpanKind":{json.dumps(KIND_NAMES.get(str(span.kind), str(span.kind)))},'
            f'"ServiceName":{resource_text[2]},"ResourceAttributes":{resource_text[1]},'
            f'"ScopeName":{json.dumps(span.scope or "")},"ScopeVersion":"",'
            f'"SpanAttributes":{json.dumps(attributes)},"Duration":{span.end_ns - span.start_ns},'
            f'"StatusCode":{json.dumps(STATUS_NAMES.get(str(span.status), str(span.status)))},"StatusMessage":"",'
            f'"LinkTraceIds":{json.dumps([link.trace_id for link in span.links])},'
            f'"LinkSpanIds":{json.dumps([link.span_id for link in span.links])}}}'
        )


def load_captures(connection: ChdbConnection, paths: Sequence[Path], folder: Path, table: str = TABLE) -> int:
    """Insert the spans of ``paths`` into ``table`` (created with the exporter's DDL if absent),
    streamed through a JSONEachRow file in ``folder``; return the number of spans."""
    connection.execute(EXPORTER_DDL.format(table=_ident(table)))
    rows = folder / "spans.jsonl"
    count = 0
    with rows.open("w", encoding="utf-8") as out:
        for line in exporter_rows(paths):
            out.write(line + "\n")
            count += 1
    insert_rows(connection, rows, table)
    rows.unlink()
    return count


def insert_rows(connection: ChdbConnection, rows: Path, table: str = TABLE) -> None:
    """Insert a JSONEachRow file of :data:`LOAD_COLUMNS` rows (the exporter's mapping) into ``table``."""
    connection.execute(
        f"INSERT INTO {_ident(table)} (Timestamp, TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, "
        "ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage, "
        "`Links.TraceId`, `Links.SpanId`, `Links.TraceState`, `Links.Attributes`) "
        "SELECT fromUnixTimestamp64Nano(start), TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, "
        "ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage, "
        "LinkTraceIds, LinkSpanIds, arrayMap(x -> '', LinkSpanIds), arrayMap(x -> map(), LinkSpanIds) "
        f"FROM file({sql_string(str(rows))}, JSONEachRow, {sql_string(LOAD_COLUMNS)})"
    )
