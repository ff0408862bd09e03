"""The queries: the aggregates the report reads, computed in the store, and the spans of a
Perfetto window; they become the ``parse.Capture`` the files give."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

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
from codegen.report.store.connection import (
    COLUMNS,
    TABLE,
    WINDOW_ROWS,
    Connection,
    Selection,
    StoreError,
    _ident,
    sql_string,
)
from codegen.report.taxonomy import Taxonomy

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
        _add_span(capture, p, name, start, end, span_id, parent, number, thread, error)
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


def _add_span(capture: Capture, p: int, name: Any, start: Any, end: Any, span_id: Any, parent: Any,
              number: Any, thread: Any, error: Any) -> None:  # fmt: skip
    """One span of a store row (its values as the store gives them) into ``capture``'s arrays."""
    capture.name.append(capture.name_id(str(name)))
    capture.process.append(p)
    capture.start.append(int(start))
    capture.end.append(int(end))
    capture.span_id.append(_hex(span_id))
    capture.parent_id.append(_hex(parent))
    capture.iteration.append(int(number))
    capture.thread.append(int(thread))
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
        _add_span(capture, process.index, name, start, end, span_id, parent, number_, thread, error)
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
