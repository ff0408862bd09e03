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

from codegen.report.store.connection import (
    EXPORTER_DDL,
    TABLE,
    ChdbConnection,
    Connection,
    HttpConnection,
    Selection,
    StoreError,
    connect,
    parse_time,
    sql_string,
)
from codegen.report.store.load import LOAD_COLUMNS, exporter_rows, insert_rows, load_captures
from codegen.report.store.queries import check_schema, queries, read_store, read_window

__all__ = [
    "EXPORTER_DDL",
    "LOAD_COLUMNS",
    "TABLE",
    "ChdbConnection",
    "Connection",
    "HttpConnection",
    "Selection",
    "StoreError",
    "check_schema",
    "connect",
    "exporter_rows",
    "insert_rows",
    "load_captures",
    "parse_time",
    "queries",
    "read_store",
    "read_window",
    "sql_string",
]
