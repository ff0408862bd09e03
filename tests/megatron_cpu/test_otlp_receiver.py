"""The test suite's live OTLP receiver (``otlp_receiver.py``), driven by the SDK's own exporters."""

from __future__ import annotations

import socket
import time

import pytest

for _module in (
    "opentelemetry.sdk.trace",
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
):
    pytest.importorskip(_module, reason=f"{_module} is needed for the OTLP receiver")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from codegen.capture import read_spans as read_capture
from tests.megatron_cpu.otlp_receiver import PROTOCOLS, OtlpReceiver


def span_exporter(receiver: OtlpReceiver, timeout: float = 5.0):
    if receiver.protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces", timeout=timeout)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"127.0.0.1:{receiver.port}", insecure=True, timeout=timeout)


def metric_exporter(receiver: OtlpReceiver):
    if receiver.protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=f"{receiver.endpoint}/v1/metrics", timeout=5)
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=f"127.0.0.1:{receiver.port}", insecure=True, timeout=5)


def send_spans(exporter, count: int = 1) -> SpanExportResult:
    """``count`` spans (a root and its children) through ``exporter``; the export's result."""
    results = []

    class Recording:
        def export(self, spans):
            results.append(exporter.export(spans))
            return results[-1]

        def shutdown(self):
            pass

        def force_flush(self, timeout_millis=0):
            return True

    provider = TracerProvider(resource=Resource.create({"service.name": "receiver-test"}))
    provider.add_span_processor(SimpleSpanProcessor(Recording()))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("root", attributes={"n": 1, "group": "job"}):
        for index in range(count - 1):
            with tracer.start_as_current_span("child", attributes={"index": index}):
                pass
    return results[-1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_accept_stores_spans_as_otlp_json_that_verify_reads(protocol, tmp_path):
    with OtlpReceiver(protocol) as receiver:
        exporter = span_exporter(receiver)
        assert send_spans(exporter, 3) == SpanExportResult.SUCCESS
        exporter.shutdown()
        spans = receiver.spans()
    assert sorted(s["name"] for s in spans) == ["child", "child", "root"]
    (root,) = [s for s in spans if s["name"] == "root"]
    assert len(root["spanId"]) == 16 and len(root["traceId"]) == 32
    int(root["spanId"], 16), int(root["traceId"], 16)  # hex, not base64
    assert "parentSpanId" not in root
    for child in (s for s in spans if s["name"] == "child"):
        assert child["parentSpanId"] == root["spanId"] and child["traceId"] == root["traceId"]
    assert {"key": "n", "value": {"intValue": "1"}} in root["attributes"]
    for resource in receiver.traces()["resourceSpans"]:  # one request per span (SimpleSpanProcessor)
        assert {"key": "service.name", "value": {"stringValue": "receiver-test"}} in resource["resource"][
            "attributes"
        ]
    captured = read_capture(receiver.write_traces(tmp_path / "traces.json"))
    assert sorted(s.name for s in captured) == ["child", "child", "root"]
    assert {s.parent_id for s in captured if s.name == "child"} == {root["spanId"]}
    assert [r.status for r in receiver.requests()] == ["ok"] * 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_metrics_arrive_with_names_and_units(protocol):
    with OtlpReceiver(protocol) as receiver:
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        reader = PeriodicExportingMetricReader(metric_exporter(receiver), export_interval_millis=3_600_000)
        provider = MeterProvider(metric_readers=[reader])
        meter = provider.get_meter("test")
        meter.create_histogram("step_ms", unit="ms").record(12.5)
        meter.create_counter("skipped", unit="1").add(2)
        provider.force_flush()
        provider.shutdown()
        document = receiver.metrics()
    metrics = {
        m["name"]: m for rm in document["resourceMetrics"] for sm in rm["scopeMetrics"] for m in sm["metrics"]
    }
    assert metrics["step_ms"]["unit"] == "ms" and "histogram" in metrics["step_ms"]
    assert metrics["skipped"]["unit"] == "1" and metrics["skipped"]["sum"]["dataPoints"][0]["asInt"] == "2"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_refuse_answers_a_retryable_error_and_stores_nothing(protocol):
    with OtlpReceiver(protocol, mode="refuse") as receiver:
        exporter = span_exporter(receiver, timeout=1.5)  # retries after 1 s, then gives up
        assert send_spans(exporter) == SpanExportResult.FAILURE
        exporter.shutdown()
        requests = receiver.requests("traces")
    assert len(requests) >= 2, "a 503 / UNAVAILABLE is retried"
    assert {r.status for r in requests} == {"refused"} and receiver.span_count() == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_slow_delays_each_answer(protocol):
    with OtlpReceiver(protocol, mode="slow", delay_s=0.5) as receiver:
        exporter = span_exporter(receiver)
        started = time.monotonic()
        assert send_spans(exporter) == SpanExportResult.SUCCESS
        assert time.monotonic() - started >= 0.5
        exporter.shutdown()
        assert receiver.span_count() == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_absent_listens_nowhere_until_it_comes_back_on_the_same_port(protocol):
    with OtlpReceiver(protocol, mode="absent") as receiver:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", receiver.port), timeout=2).close()
        exporter = span_exporter(receiver, timeout=1.5)
        assert send_spans(exporter) == SpanExportResult.FAILURE
        assert receiver.requests() == []
        receiver.set_mode("accept")
        assert send_spans(exporter) == SpanExportResult.SUCCESS
        receiver.set_mode("absent")  # the exporter's open keep-alive connection goes too
        assert send_spans(exporter) == SpanExportResult.FAILURE
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", receiver.port), timeout=2).close()
        exporter.shutdown()
    assert receiver.span_count() == 1
    assert [r.mode for r in receiver.requests()] == ["accept"]


def test_bounded_requests_and_duration():
    with OtlpReceiver("http", max_requests=1, max_duration_s=2.0) as receiver:
        exporter = span_exporter(receiver, timeout=1.5)
        assert send_spans(exporter) == SpanExportResult.SUCCESS
        assert send_spans(exporter) == SpanExportResult.FAILURE  # over the limit: refused
        assert receiver.span_count() == 1
        assert receiver.wait_for(lambda r: r.stopped, timeout=10)  # stops by itself
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", receiver.port), timeout=2).close()
        exporter.shutdown()


def test_modes_are_checked():
    with pytest.raises(ValueError, match="valid modes: accept, slow, refuse, absent"):
        OtlpReceiver("http", mode="flaky")
    with pytest.raises(ValueError, match="valid protocols: http, grpc"):
        OtlpReceiver("udp")
