"""The runtime's own OTLP encoding (``_otlp``) against the SDK exporter's, on the same spans.

The lean path's export thread writes OTLP/HTTP requests itself. Here ``test_lean_path``'s workload
(lifecycle spans with links, call-site attributes one of which the SDK's validation drops,
attributes set on the current span and stamped, exceptions, foreign spans around and inside
taxonomy spans, a second thread) plus spans with every plain value type, an attribute overriding a
span name's own, a value outside int64, a remote parent with a trace state, runs on the lean path;
each batch the recorder exports is encoded by ``_otlp.SpanEncoder`` and, from the same records
made ``ReadableSpan`` s, by the SDK exporter's ``encode_spans``: the two requests, parsed, must be
equal message for message (ids and times included: they are the same records).

Here rather than in ``tests/runtime_pkg``: the OTLP exporters are installed in the runtime tox
environment (``tox -e runtime``), not in ``tox -e test``'s. The runtime is the source package
(``codegen.otel_runtime``), reset around each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.common.trace_encoder",
    reason="opentelemetry-exporter-otlp-proto-common is needed to compare the OTLP encodings",
)
from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanContext, TraceFlags, TraceState

from tests.support.lean_workload import own_provider_exporting_to, workload
from tests.support.processors import in_memory


@pytest.fixture
def otel() -> Iterator[ModuleType]:
    import codegen.otel_runtime as module

    module.reset()
    yield module
    module.reset()


def more_spans(otel: ModuleType) -> None:
    values = {"s": "text é", "empty": "", "t": True, "f": False, "i": -7, "zero": 0, "x": 2.5}
    span = otel.LAYER and otel.start_span("megatron.layer.forward", lambda: values)
    span and span.end()
    span = otel.LAYER and otel.start_span(
        "megatron.layer.mlp", lambda: {"megatron.span_group": "overridden", "after": 1}
    )
    span and span.end()
    span = otel.LAYER and otel.start_span("megatron.layer.mlp", lambda: {"huge": 2**70})
    span and span.end()
    for state in (TraceState([("k", "v")]), None):  # a remote parent with a trace state, one without
        remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=state)
        token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
        try:
            span = otel.LAYER and otel.start_span("megatron.layer.forward")
            span and span.end()
        finally:
            context.detach(token)


def test_the_runtime_encodes_a_batch_as_the_sdk_exporter_does(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    own_provider_exporting_to(otel, monkeypatch, lean=True)
    batches: list[list[Any]] = []
    monkeypatch.setattr(
        otel._lean_recorder.LeanRecorder, "_export", lambda self, batch: batches.append(batch)
    )
    foreign_provider, _ = in_memory()
    otel.configure()
    (recorder,) = otel._state.PROCESS.run.processors
    workload(otel, foreign_provider.get_tracer("foreign"), TracerProvider(sampler=ALWAYS_OFF).get_tracer("m"))
    more_spans(otel)
    sdk_tracer = otel._state.PROCESS.run.tracer.sdk_tracer  # the same provider's SDK tracer
    with sdk_tracer.start_as_current_span("sdk.span", attributes={"a": 1}):
        pass
    recorder.force_flush(10_000)
    spans = [span for batch in batches for span in batch]
    assert len(spans) >= 20, [s.name for s in spans]
    lean = [s for s in spans if type(s) is otel._lean_span.LeanSpan]
    assert 16 <= len(lean) < len(spans)  # SDK spans of the same provider too (the lifecycle)
    encoder = otel._otlp.SpanEncoder(
        recorder.resource, recorder.scope, recorder.base, recorder.limits,
        otel._lean_span.LeanSpan, recorder.materialize,
    )  # fmt: skip
    fast = 0
    for batch in batches:
        data, count, failed = encoder.encode(batch)
        assert (count, failed) == (len(batch), 0)
        ours = ExportTraceServiceRequest.FromString(data)
        readable = [recorder.materialize(s) if type(s) is otel._lean_span.LeanSpan else s for s in batch]
        theirs = ExportTraceServiceRequest.FromString(encode_spans(readable).SerializeToString())
        assert ours == theirs
        fast += sum(encoder._fast(s) is not None for s in batch if type(s) is otel._lean_span.LeanSpan)
    # most spans are written by the runtime itself, the unusual ones by the SDK's encoder
    assert 8 <= fast < len(lean)
    (request,) = [ExportTraceServiceRequest.FromString(encoder.encode(b)[0]) for b in batches]
    written = [s for r in request.resource_spans for ss in r.scope_spans for s in ss.spans]
    by_name = {}
    for span in written:
        by_name.setdefault(span.name, []).append(span)
    remote = [s for s in written if s.parent_span_id == (0xDEF).to_bytes(8, "big")]
    assert len(remote) == 2 and {s.trace_state for s in remote} == {"k=v", ""}
    assert all(s.flags == 0x300 for s in remote)
    huge = [s for s in by_name["megatron.layer.mlp"] if any(a.key == "huge" for a in s.attributes)]
    assert not huge  # outside int64: the SDK's encoder leaves it out, and so does the runtime's


def test_the_lean_recorder_sends_its_own_encoding_only_through_the_otlp_http_exporter(
    otel: ModuleType,
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces", timeout=0.1)
    assert otel._otlp.sender(exporter) is not None
    assert otel._otlp.sender(InMemorySpanExporter()) is None
    otel._otlp.ENABLED = False
    try:
        assert otel._otlp.sender(exporter) is None
    finally:
        otel._otlp.ENABLED = True
    exporter.shutdown()
    send = otel._otlp.sender(exporter)
    assert send is not None and send(b"") is False  # a shut-down exporter sends nothing


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"HTTP_PROXY": "http://proxy.example:3128", "ALL_PROXY": "http://all.example:1"},
        {"HTTP_PROXY": "http://proxy.example:3128", "NO_PROXY": "127.0.0.1"},
        {"REQUESTS_CA_BUNDLE": "/etc/bundle.pem"},
        {"CURL_CA_BUNDLE": "/etc/curl.pem", "NETRC": "{netrc}"},
    ],
)
def test_the_sender_reads_the_environment_once_and_sends_as_requests_would(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, environ: dict[str, str]
) -> None:
    """requests reads proxies, a .netrc and a CA bundle from the environment on every request;
    the sender reads them once: each request's settings are those requests would have merged."""
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login user password secret\n")
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    ):
        for variant in (name, name.lower()):
            monkeypatch.delenv(variant, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    for name, value in environ.items():
        monkeypatch.setenv(name, value.format(netrc=netrc))
    endpoint = "http://127.0.0.1:9/v1/traces"
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=0.1)
    session = exporter._client._transport._session

    def merged() -> tuple[Any, ...]:
        request = session.prepare_request(requests.Request("POST", endpoint, data=b"x"))
        settings = session.merge_environment_settings(endpoint, {}, None, None, None)
        return settings["proxies"], settings["verify"], request.headers.get("Authorization")

    before = merged()
    assert otel._otlp.sender(exporter) is not None
    assert session.trust_env is False
    for name in environ:  # read once: a change afterwards is not seen
        monkeypatch.setenv(name, "http://changed.example:1")
    assert merged() == before
    if "NETRC" in environ:
        assert before[2] is not None  # the netrc's credentials, kept
    exporter.shutdown()


class RawCollector:
    """An HTTP/1.1 server on a thread that keeps every request's bytes as they arrived (head and
    body) and answers each with ``answers`` in turn (then 200, no body), keeping connections
    alive."""

    def __init__(self, answers: list[bytes]) -> None:
        import socket
        import threading

        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        import threading

        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(connection,), daemon=True).start()

    def answer(self, connection: Any) -> None:
        buffered = b""
        with connection:
            while True:
                while b"\r\n\r\n" not in buffered:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    buffered += chunk
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffered) < length:
                    buffered += connection.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + buffered[:length])
                buffered = buffered[length:]
                answer = self.answers.pop(0) if self.answers else b""
                connection.sendall(answer or b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        self.server.close()


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_the_sender_puts_on_the_wire_what_the_exporter_s_client_puts(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    """The sender's requests (the request prepared once, sent by the session's adapter) are,
    byte for byte, the exporter's own client's: its headers, the session's, the compression,
    a cookie the collector set, a session header and proxy changed afterwards; a refused request
    fails alike."""
    import gzip

    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    cookie = b"HTTP/1.1 200 OK\r\nSet-Cookie: lb=one; Path=/\r\nContent-Length: 0\r\n\r\n"
    refused = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\nno"
    seen: dict[str, list[bytes]] = {}
    results: dict[str, list[Any]] = {}
    collector = RawCollector([b"", b"", cookie, b"", refused] * 2)
    for way in ("client", "sender"):
        collector.requests = []
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{collector.port}/v1/traces",
            headers={"x-tenant": "a b", "Authorization": "Bearer t"},
            compression={"none": Compression.NoCompression, "gzip": Compression.Gzip}[compression],
            timeout=5,
        )
        send = otel._otlp.sender(exporter)
        assert send is not None
        transport = exporter._client._transport
        session = transport._session
        base = transport.request
        through_session: list[bytes] = []  # the sender's requests that go the session's way

        def request(*args: Any, **kwargs: Any) -> Any:
            through_session.append(kwargs["data"])
            return base(*args, **kwargs)

        monkeypatch.setattr(transport, "request", request)
        post = (lambda d: exporter._client.export(d).success) if way == "client" else send
        outcomes = [post(b"\x0a\x00" * 40)]
        session.proxies = {"http": f"http://127.0.0.1:{collector.port}"}  # itself, as a proxy
        outcomes += [post(b"\x0a\x01")]
        session.headers["X-Later"] = "2"
        outcomes += [post(b"\x0a\x02" * 300), post(b"\x0a\x03"), post(b"\x0a\x04")]
        seen[way] = collector.requests
        results[way] = outcomes
        assert len(session.cookies) == 1
        if way == "sender":  # once the session holds a cookie, requests prepares each request
            assert len(through_session) == 2  # the last two
        exporter.shutdown()
    collector.close()
    assert results["client"] == results["sender"] == [True, True, True, True, False]

    def parts(request: bytes) -> tuple[bytes, bytes]:  # gzip writes the time: compare the data
        head, _, body = request.partition(b"\r\n\r\n")
        return head, gzip.decompress(body) if compression == "gzip" else body

    assert len(seen["sender"]) == 5
    assert list(map(parts, seen["client"])) == list(map(parts, seen["sender"]))
    assert parts(seen["sender"][0])[1] == b"\x0a\x00" * 40
    assert b"Cookie: lb=one" in seen["sender"][3] and b"X-Later: 2" in seen["sender"][2]
    assert seen["sender"][0].startswith(b"POST /v1/traces ")
    assert seen["sender"][1].startswith(b"POST http://127.0.0.1:")  # through the proxy


def test_a_batch_with_spans_of_another_resource_keeps_its_own_spans_too(otel: ModuleType) -> None:
    """A batch holding lean spans and an SDK span of another resource: one request with both
    resources, every span in it (counted once)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    resource = Resource.create({"service.name": "own"})
    provider, exporter = in_memory(resource=Resource.create({"service.name": "other"}))
    for name in ("other.a", "other.b"):
        provider.get_tracer("other").start_span(name).end()
    foreign = list(exporter.get_finished_spans())
    lean = otel._lean_span
    parent = lean.new_span(None, "parent", None, (5, 1, None), None, 10, span_id=3)
    child = lean.new_span(None, "child", parent, (5, 1, None), {"n": 1}, 11, span_id=4)
    parent._end, child._end = 20, 19
    encoder = otel._otlp.SpanEncoder(
        resource, InstrumentationScope("s"), {}, SpanLimits(), lean.LeanSpan, lambda s: None
    )
    data, count, failed = encoder.encode([child, foreign[0], parent, foreign[1]])
    assert (count, failed) == (4, 0)
    request = ExportTraceServiceRequest.FromString(data)
    services = {
        next(a.value.string_value for a in r.resource.attributes if a.key == "service.name"): sorted(
            s.name for ss in r.scope_spans for s in ss.spans
        )
        for r in request.resource_spans
    }
    assert services == {"own": ["child", "parent"], "other": ["other.a", "other.b"]}
