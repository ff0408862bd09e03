"""Local captures into the exporter's schema (chdb): ``codegen report --engine chdb`` and the
tests load capture files this way."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from codegen.report.store.connection import EXPORTER_DDL, TABLE, ChdbConnection, _ident, sql_string


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
