"""A live OTLP receiver for the tests: OTLP/HTTP (protobuf) and OTLP/gRPC, on 127.0.0.1 only.

What arrives is decoded with ``opentelemetry-proto`` and kept as OTLP JSON (ids in hex, enums as
integers, 64-bit integers as strings), the format ``codegen verify`` reads::

    with OtlpReceiver("http") as receiver:       # or "grpc"
        env = receiver.environ()                 # OTEL_EXPORTER_OTLP_ENDPOINT, _PROTOCOL
        ...run something that exports...
        receiver.wait_for(lambda r: r.span_count() >= 10, timeout=10)
        receiver.write_traces(path)              # {"resourceSpans": [...]}

Modes (``mode=`` or ``set_mode()`` at any time):

- ``accept``: answer 200 / OK and store what arrived;
- ``slow``: wait ``delay_s`` before each answer (then accept);
- ``refuse``: HTTP 503 / gRPC UNAVAILABLE (retryable for an OTLP exporter); nothing is stored;
- ``absent``: nothing listens on the port (connections are refused); leaving ``absent`` listens
  again on the same port, which is how a collector "comes back".

Bounded: at most ``max_requests`` requests are answered normally (later ones are refused), a body
larger than ``max_body`` bytes is answered 413, and the receiver stops itself ``max_duration_s``
after it started. Every request is logged in ``requests()`` with its mode and answer.
"""

from __future__ import annotations

import base64
import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.support.ports import HOST, free_port

MODES = ("accept", "slow", "refuse", "absent")
# the protocols the installed exporters speak: OTLP/HTTP always, OTLP/gRPC with grpcio and its exporter
PROTOCOLS = ["http"]
try:
    import grpc  # noqa: F401
    import opentelemetry.exporter.otlp.proto.grpc.trace_exporter  # noqa: F401

    PROTOCOLS.append("grpc")
except ImportError:
    pass
# OTLP/HTTP path -> (signal, request type, response type)
HTTP_PATHS: dict[str, tuple[str, Any, Any]] = {
    "/v1/traces": (
        "traces",
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
    ),
    "/v1/metrics": (
        "metrics",
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
    ),
    "/v1/logs": (
        "logs",
        logs_service_pb2.ExportLogsServiceRequest,
        logs_service_pb2.ExportLogsServiceResponse,
    ),
}
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


@dataclass
class Request:
    """One request the receiver answered."""

    signal: str  # traces, metrics, logs, or "?" for an unknown path
    protocol: str
    mode: str  # the receiver's mode when the request arrived
    status: str  # "ok", "refused", "too large", "bad request", "over limit"
    at: float  # time.monotonic() when it arrived
    message: Any = field(default=None, repr=False)  # the decoded export request, when stored
    _document: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def document(self) -> dict[str, Any] | None:
        """The request as OTLP JSON (converted when first asked: no receiver work during a run)."""
        if self._document is None and self.message is not None:
            self._document = to_otlp_json(self.message)
        return self._document


def to_otlp_json(message: Any) -> dict[str, Any]:
    """A protobuf export request as OTLP JSON: lowerCamelCase keys, integer enums, hex ids."""
    document = json_format.MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(document)
    return document


def _hex_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


class OtlpReceiver:
    def __init__(
        self,
        protocol: str = "http",
        mode: str = "accept",
        *,
        delay_s: float = 1.0,
        max_requests: int = 10_000,
        max_body: int = 32 * 2**20,
        max_duration_s: float = 300.0,
        port: int | None = None,
    ) -> None:
        if protocol not in ("http", "grpc"):
            raise ValueError(f"protocol {protocol!r}: valid protocols: http, grpc")
        self.protocol = protocol
        self.port = port or free_port()
        self.delay_s = delay_s
        self.max_requests = max_requests
        self.max_body = max_body
        self.max_duration_s = max_duration_s
        self._check_mode(mode)
        self._mode = mode
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._server: Any = None
        self._stopping = threading.Event()
        self._stopped = threading.Event()  # set once nothing listens any more
        self._timer: threading.Timer | None = None
        self._answered = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> OtlpReceiver:
        self._timer = threading.Timer(self.max_duration_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        if self._mode != "absent":
            self._listen()
        return self

    def stop(self) -> None:
        """Stop listening and release waiting requests; idempotent."""
        self._stopping.set()  # releases slow answers
        if self._timer is not None:
            self._timer.cancel()
        self._close()
        self._stopped.set()

    def __enter__(self) -> OtlpReceiver:  # noqa: PYI034 - start() returns self
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    @property
    def mode(self) -> str:
        return self._mode

    def set_mode(self, mode: str) -> None:
        self._check_mode(mode)
        if mode == "absent" and self._mode != "absent":
            # nothing listens and no connection is left before the mode says "absent": a request
            # that came on a kept-alive connection meanwhile is logged in the mode it came in
            self._close()
        with self._lock:
            previous, self._mode = self._mode, mode
        if previous == "absent" and mode != "absent" and not self._stopping.is_set():
            self._listen()

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def environ(self) -> dict[str, str]:
        """The standard variables that point an OTLP exporter at this receiver."""
        protocol = "http/protobuf" if self.protocol == "http" else "grpc"
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
        }

    # -- what arrived -----------------------------------------------------------------------------

    def requests(self, signal: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self._requests if signal is None or r.signal == signal]

    def documents(self, signal: str) -> list[dict[str, Any]]:
        return [r.document for r in self.requests(signal) if r.document is not None]

    def traces(self) -> dict[str, Any]:
        """Every span received, as one OTLP JSON document."""
        return {"resourceSpans": [rs for d in self.documents("traces") for rs in d.get("resourceSpans", [])]}

    def metrics(self) -> dict[str, Any]:
        """Every metric received, as one OTLP JSON document."""
        return {
            "resourceMetrics": [rm for d in self.documents("metrics") for rm in d.get("resourceMetrics", [])]
        }

    def spans(self) -> list[dict[str, Any]]:
        return [
            span
            for rs in self.traces()["resourceSpans"]
            for scope in rs.get("scopeSpans", [])
            for span in scope.get("spans", [])
        ]

    def span_count(self) -> int:
        return len(self.spans())

    def write_traces(self, path: Path) -> Path:
        path.write_text(json.dumps(self.traces(), indent=1) + "\n", encoding="utf-8")
        return path

    def wait_for(self, predicate: Callable[[OtlpReceiver], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.05)
        return predicate(self)

    # -- serving ----------------------------------------------------------------------------------

    @staticmethod
    def _check_mode(mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: valid modes: {', '.join(MODES)}")

    def _listen(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            self._server = (self._http_server if self.protocol == "http" else self._grpc_server)()

    def _close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is None:
            return
        if self.protocol == "http":
            server.shutdown()
            server.server_close()
            for connection in list(server.connections):  # keep-alive connections too: gone
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        else:
            server.stop(grace=None).wait(5)

    def _answer(
        self, signal: str, decode: Callable[[], Any] | None, arrived: str | None = None
    ) -> tuple[str, float]:
        """Record a request (under the mode it ``arrived`` in, if given: a mode switched while its
        body was read does not apply to it); return (status, delay before answering)."""
        with self._lock:
            mode = self._mode if arrived is None else arrived
            self._answered += 1
            over = self._answered > self.max_requests
        at = time.monotonic()
        if over or self._stopping.is_set():
            status = "over limit"
        elif mode == "refuse" or decode is None:
            status = "refused" if decode is not None else "bad request"
        else:
            status = "ok"
        message = None
        if status == "ok":
            try:
                message = decode()
            except Exception:  # noqa: BLE001 - a malformed body is answered 400
                status = "bad request"
        with self._lock:
            self._requests.append(Request(signal, self.protocol, mode, status, at, message))
        return status, (self.delay_s if mode == "slow" and status == "ok" else 0.0)

    def _delay(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _http_server(self) -> ThreadingHTTPServer:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30  # seconds a client may take to send its request

            def setup(self) -> None:
                super().setup()
                self.server.connections.add(self.connection)

            def finish(self) -> None:
                self.server.connections.discard(self.connection)
                super().finish()

            def do_POST(self) -> None:
                arrived = receiver.mode  # the mode when the request came, not when it is answered
                entry = HTTP_PATHS.get(self.path.split("?")[0])
                length = int(self.headers.get("Content-Length") or 0)
                if length > receiver.max_body:
                    self.close_connection = True
                    self._reply(413, b"")
                    return
                body = self.rfile.read(length)
                if entry is None:
                    self._reply(404, b"")
                    return
                signal, request_type, response_type = entry
                encoding = (self.headers.get("Content-Encoding") or "").lower()

                def decode() -> Any:
                    data = body
                    if encoding == "gzip":
                        data = gzip.decompress(data)
                    elif encoding == "deflate":
                        data = zlib.decompress(data)
                    message = request_type()
                    message.ParseFromString(data)
                    return message

                status, delay = receiver._answer(signal, decode, arrived)
                receiver._delay(delay)
                if status == "ok":
                    self._reply(200, response_type().SerializeToString())
                elif status == "bad request":
                    self._reply(400, b"")
                else:
                    self._reply(503, b"")

            def _reply(self, code: int, payload: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            connections: set[socket.socket]

        server = Server((HOST, self.port), Handler)
        server.connections = set()
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name="otlp-http"
        ).start()
        return server

    def _grpc_server(self) -> Any:
        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        def handle(signal: str, response_type: Any) -> Callable[[Any, Any, Any], Any]:
            def export(servicer: Any, request: Any, context: Any) -> Any:
                status, delay = receiver._answer(signal, lambda: request)
                receiver._delay(delay)
                if status != "ok":
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"test receiver: {status}")
                return response_type()

            return export

        traces = type(
            "Traces",
            (trace_service_pb2_grpc.TraceServiceServicer,),
            {"Export": handle("traces", trace_service_pb2.ExportTraceServiceResponse)},
        )
        metrics = type(
            "Metrics",
            (metrics_service_pb2_grpc.MetricsServiceServicer,),
            {"Export": handle("metrics", metrics_service_pb2.ExportMetricsServiceResponse)},
        )
        logs = type(
            "Logs",
            (logs_service_pb2_grpc.LogsServiceServicer,),
            {"Export": handle("logs", logs_service_pb2.ExportLogsServiceResponse)},
        )
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc"),
            options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", self.max_body)],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(metrics(), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(logs(), server)
        port = server.add_insecure_port(f"{HOST}:{self.port}")
        if port != self.port:
            server.stop(None)
            raise OSError(f"cannot listen on {HOST}:{self.port}")
        server.start()
        return server
