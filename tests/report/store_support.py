"""A chdb store for the tests: ``otel_traces`` created with the exporter's DDL and filled from
capture files in the exporter's column mapping, and ClickHouse's HTTP interface in front of it."""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from codegen.report.store import EXPORTER_DDL, ChdbConnection, load_captures


def make_store(folder: Path, paths: list[Path]) -> Path:
    """A chdb database folder holding ``otel_traces`` (the exporter's DDL) with the spans of ``paths``."""
    folder.mkdir()
    connection = ChdbConnection(str(folder))
    try:
        connection.execute(EXPORTER_DDL.format(table="otel_traces"))
        load_captures(connection, paths, folder)
        (count,) = connection.rows("SELECT count() FROM otel_traces")[0]
        assert count > 0
    finally:
        connection.close()
    return folder


class ChdbHttp(http.server.BaseHTTPRequestHandler):
    """ClickHouse's HTTP interface as the report uses it (POST a query; ``database`` and
    ``default_format`` in the URL; HTTP 500 and the exception's text on an error), answered by chdb."""

    store: ChdbConnection
    seen: list[str]

    def do_POST(self) -> None:  # the http.server name
        params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        sql = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self.seen.append(sql)
        assert params["default_format"] == "JSONCompact" and params["database"] == "default"
        try:
            body = self.store.session.query(sql, params["default_format"]).bytes()
            status = 200
        except Exception as exc:  # noqa: BLE001  # as the server: any failure is a 500 with its text
            body, status = f"Code: 60. DB::Exception: {exc}".encode(), 500
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def chdb_http(store: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve the chdb folder ``store`` over ClickHouse's HTTP interface: (URL, the queries seen)."""
    connection = ChdbConnection(str(store))
    handler = type("Handler", (ChdbHttp,), {"store": connection, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.seen
    finally:
        server.shutdown()
        server.server_close()
        connection.close()
