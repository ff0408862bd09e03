"""The lean path on a tracer provider the program or the OpenTelemetry distro set
(``opentelemetry-instrument`` builds one from the ``OTEL_*`` variables: the SDK's
``TracerProvider``, the default sampler, one ``BatchSpanProcessor`` over the exporter
``OTEL_TRACES_EXPORTER`` names). ``_lean_install.borrowable`` decides; the recorder sends through that
provider's own exporter, with its resource and span limits, never while the provider's processor
is in the exporter; ``MEGATRON_OTEL_RECORDING`` forces either path.

The capture of the same workload as ``test_lean_path.py``'s on the lean path and on the SDK path of
the same provider shape is compared field by field (ids and times aside).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, TraceIdRatioBased

from tests.support.lean_workload import normalized, workload
from tests.support.processors import in_memory


def environment(monkeypatch: pytest.MonkeyPatch, recording: str) -> None:
    for name, value in {
        "MEGATRON_OTEL_ENABLED": "1",
        "MEGATRON_OTEL_SPAN_GROUPS": "all",
        "MEGATRON_OTEL_METRICS_ENABLED": "0",
        "MEGATRON_OTEL_RECORDING": recording,
    }.items():
        monkeypatch.setenv(name, value)


def distro_provider(exporter: SpanExporter, **options: Any) -> TracerProvider:
    """A provider as the distro's configurator builds it (``_init_tracing``): the resource from
    the environment, the batch processor over the exporter."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "distro-test", "deployment.environment": "ci"}),
        shutdown_on_exit=False,
        **options,
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def tracer_name(otel: ModuleType) -> str:
    return type(otel._state.PROCESS.run.tracer).__name__


def run(otel: ModuleType, monkeypatch: pytest.MonkeyPatch, recording: str) -> list[ReadableSpan]:
    environment(monkeypatch, recording)
    exporter = InMemorySpanExporter()
    provider = distro_provider(exporter, span_limits=SpanLimits(max_span_attributes=4))
    foreign_provider, foreign_exporter = in_memory(shutdown_on_exit=False)
    otel.configure(tracer_provider=provider)
    assert tracer_name(otel) == ("LeanTracer" if recording == "lean" else "Tracer")
    workload(
        otel,
        foreign_provider.get_tracer("foreign"),
        TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False).get_tracer("muted"),
    )
    otel.shutdown()  # flushes the recorder, then the provider (borrowed: not shut down)
    assert "export" not in vars(exporter)  # its own export again
    spans = list(exporter.get_finished_spans()) + list(foreign_exporter.get_finished_spans())
    provider.shutdown()
    return sorted(spans, key=lambda s: s.start_time or 0)


def test_lean_on_a_distro_provider_exports_what_its_sdk_path_exports_field_by_field(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MEGATRON_OTEL_RECORDING=lean: the in-memory exporter is no standard one (auto: the SDK path)
    sdk_spans = run(otel, monkeypatch, "sdk")
    otel.reset()
    lean_spans = run(otel, monkeypatch, "lean")
    sdk, lean = normalized(sdk_spans), normalized(lean_spans)
    assert len(lean) == len(sdk) == 20
    for lean_span, sdk_span in zip(lean, sdk):
        assert lean_span == sdk_span
    # the provider's resource and limits (4 attributes at most), not the runtime's
    assert lean[0]["resource"]["service.name"] == "distro-test"
    assert lean[0]["resource"]["deployment.environment"] == "ci"
    assert "megatron.num_layers" not in lean[0]["resource"]
    mlp = next(s for s in lean_spans if s.name == "megatron.layer.mlp")
    sdk_mlp = next(s for s in sdk_spans if s.name == "megatron.layer.mlp")
    assert len(mlp.attributes or {}) == len(sdk_mlp.attributes or {}) == 4
    # what the limit dropped, counted as the SDK path counts it (SDK 1.27 counts none here)
    assert mlp.dropped_attributes == sdk_mlp.dropped_attributes


class Counting(SpanExporter):
    """An exporter that notes how many threads are inside ``export`` at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self.calls: list[str] = []
        self.spans = 0
        self.shut = False
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.calls.append(threading.current_thread().name)
        time.sleep(0.002)  # long enough for another thread to come in, were it let in
        with self._lock:
            self.inside -= 1
            self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.shut = True


@pytest.mark.parametrize("processor", [SimpleSpanProcessor, BatchSpanProcessor])
def test_the_borrowed_exporter_is_never_driven_from_two_threads_at_once(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, processor: type
) -> None:
    """Lean spans from four threads (sent by the recorder's thread) and the provider's own SDK
    spans from four more (the simple processor exports on each of them, the batch one on its
    thread) go through one exporter; at most one thread is ever inside its ``export``."""
    environment(monkeypatch, "lean")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "5")
    exporter = Counting()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(
        processor(exporter, **({"schedule_delay_millis": 5} if processor is BatchSpanProcessor else {}))
    )
    otel.configure(tracer_provider=provider)
    assert tracer_name(otel) == "LeanTracer"
    foreign = provider.get_tracer("foreign")
    per_thread = 150

    def lean() -> None:
        for _ in range(per_thread):
            span = otel.start_span("megatron.layer.forward")
            span and span.end()

    def sdk() -> None:
        for _ in range(per_thread):
            foreign.start_span("foreign.op").end()

    threads = [threading.Thread(target=f) for f in (lean, sdk) * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    otel.shutdown()
    provider.force_flush()
    assert exporter.spans == 8 * per_thread
    assert exporter.most == 1, exporter.most
    assert "megatron-otel-export" in exporter.calls and len(set(exporter.calls)) >= 2
    assert not exporter.shut  # the provider's to shut down
    provider.shutdown()
    assert exporter.shut


def decide(otel: ModuleType, monkeypatch: pytest.MonkeyPatch, provider: Any, recording: str = "auto") -> str:
    environment(monkeypatch, recording)
    otel.configure(tracer_provider=provider)
    name = tracer_name(otel)
    otel.reset()
    provider.shutdown()
    return name


def with_processors(*processors: Any, **options: Any) -> TracerProvider:
    provider = TracerProvider(shutdown_on_exit=False, **options)
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


class MyProvider(TracerProvider):
    pass


class MyBatch(BatchSpanProcessor):
    pass


def console() -> ConsoleSpanExporter:
    return ConsoleSpanExporter(out=open("/dev/null", "w"))


def otlp_http() -> Any:
    module = pytest.importorskip(
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        reason="the OTLP/HTTP exporter is installed in tox -e runtime's environment, which runs these",
    )
    return module.OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")


CASES = {
    # what opentelemetry-instrument builds: the lean path
    "distro console": (lambda: with_processors(BatchSpanProcessor(console())), "auto", "LeanTracer"),
    "distro otlp": (lambda: with_processors(BatchSpanProcessor(otlp_http())), "auto", "LeanTracer"),
    "simple otlp": (lambda: with_processors(SimpleSpanProcessor(otlp_http())), "auto", "LeanTracer"),
    "always_on": (
        lambda: with_processors(BatchSpanProcessor(console()), sampler=ALWAYS_ON),
        "auto",
        "LeanTracer",
    ),
    # anything else: the SDK path, unless forced
    "another exporter": (
        lambda: with_processors(BatchSpanProcessor(InMemorySpanExporter())),
        "auto",
        "Tracer",
    ),
    "another exporter, forced": (
        lambda: with_processors(BatchSpanProcessor(InMemorySpanExporter())),
        "lean",
        "LeanTracer",
    ),
    "two processors": (
        lambda: with_processors(BatchSpanProcessor(console()), SimpleSpanProcessor(InMemorySpanExporter())),
        "lean",
        "Tracer",
    ),
    "another processor": (lambda: with_processors(MyBatch(console())), "lean", "Tracer"),
    "no processor": (lambda: with_processors(), "lean", "Tracer"),
    "another sampler": (
        lambda: with_processors(BatchSpanProcessor(console()), sampler=TraceIdRatioBased(0.5)),
        "auto",
        "Tracer",
    ),
    "another sampler, forced": (
        lambda: with_processors(BatchSpanProcessor(console()), sampler=TraceIdRatioBased(0.5)),
        "lean",
        "LeanTracer",
    ),
    "another id generator": (
        lambda: with_processors(
            BatchSpanProcessor(console()), id_generator=type("Ids", (RandomIdGenerator,), {})()
        ),
        "auto",
        "Tracer",
    ),
    "a provider subclass": (
        lambda: MyProvider(shutdown_on_exit=False),
        "lean",
        "Tracer",
    ),
    "the distro's, sdk forced": (lambda: with_processors(BatchSpanProcessor(console())), "sdk", "Tracer"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_which_providers_record_lean(otel: ModuleType, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    make, recording, expected = CASES[case]
    assert decide(otel, monkeypatch, make(), recording) == expected


def test_the_decision_is_logged_with_its_reason(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    decide(otel, monkeypatch, with_processors(BatchSpanProcessor(console())))
    decide(otel, monkeypatch, with_processors(BatchSpanProcessor(console()), sampler=TraceIdRatioBased(0.5)))
    decide(otel, monkeypatch, with_processors(MyBatch(console())), "lean")
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "spans record on" in r.getMessage()]
    assert [level for level, _ in lines] == ["INFO", "INFO", "WARNING"], lines
    assert "lean path, through the global (or given) tracer provider (TracerProvider)" in lines[0][1]
    assert "SDK path" in lines[1][1] and "TraceIdRatioBased" in lines[1][1]
    assert "span processor is a MyBatch" in lines[2][1]


def test_an_invalid_recording_setting_is_one_clear_error(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment(monkeypatch, "fast")
    with pytest.raises(
        ValueError, match=r"MEGATRON_OTEL_RECORDING='fast' is not valid; valid values: auto, lean, sdk"
    ):
        otel.configure()


def test_a_later_run_on_the_same_provider_decides_afresh(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    provider = with_processors(BatchSpanProcessor(exporter))
    environment(monkeypatch, "lean")
    otel.configure(tracer_provider=provider)
    assert tracer_name(otel) == "LeanTracer"
    otel.reset()
    environment(monkeypatch, "sdk")
    otel.configure(tracer_provider=provider)
    assert tracer_name(otel) == "Tracer"
    span = otel.start_span("megatron.layer.forward")
    assert span is not None
    span.end()
    otel.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == ["megatron.layer.forward"]
    provider.shutdown()


class Unwrappable(SpanExporter):
    """An exporter whose ``export`` cannot be replaced on the instance."""

    def __init__(self) -> None:
        self.spans: list[str] = []

    def __setattr__(self, name: str, value: object) -> None:
        if name == "export":
            raise AttributeError("read-only")
        super().__setattr__(name, value)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(s.name for s in spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_an_exporter_that_cannot_be_shared_keeps_the_sdk_path_and_starts_no_thread(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    exporter = Unwrappable()
    provider = with_processors(SimpleSpanProcessor(exporter))
    before = {t.ident for t in threading.enumerate() if t.name == "megatron-otel-export"}
    environment(monkeypatch, "lean")
    otel.configure(tracer_provider=provider)
    assert tracer_name(otel) == "Tracer"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the recorder's thread, started, stops at once
        after = {t.ident for t in threading.enumerate() if t.name == "megatron-otel-export"}
        if after == before:
            break
        time.sleep(0.01)
    assert after == before
    span = otel.start_span("megatron.layer.forward")
    assert span is not None
    span.end()
    otel.shutdown()
    assert exporter.spans == ["megatron.layer.forward"]
    assert any("cannot be shared" in r.getMessage() for r in caplog.records), caplog.records
    provider.shutdown()
