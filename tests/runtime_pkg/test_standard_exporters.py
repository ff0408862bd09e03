"""Issue 17, item 3: the runtime's own providers honour OTEL_TRACES_EXPORTER and
OTEL_METRICS_EXPORTER (MEGATRON_OTEL_EXPORTER is the alias that chooses both); the tracer and meter
carry the instrumentation's version and the registry's schema URL; the span processor is the
runtime's own (public SDK interfaces only) with a bounded queue and drop counts; no private
module or attribute of the SDK is named anywhere in the runtime."""

from __future__ import annotations

import importlib
import re
import threading
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from codegen.emit.package import REQUIRES
from tests.support.lean_workload import set_env
from tests.support.processors import in_memory

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "codegen" / "otel_runtime"


@pytest.mark.parametrize(
    ("env", "traces", "metrics"),
    [
        ({}, "otlp", "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}, "console", "none"),
        ({"OTEL_TRACES_EXPORTER": "none"}, "none", "otlp"),
        ({"OTEL_TRACES_EXPORTER": "zipkin,console"}, "console", "otlp"),
        ({"OTEL_METRICS_EXPORTER": "prometheus"}, "otlp", "none"),
        # the alias chooses both, over the standard variables
        ({"MEGATRON_OTEL_EXPORTER": "console", "OTEL_TRACES_EXPORTER": "none"}, "console", "console"),
    ],
)
def test_exporter_per_signal(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], traces: str, metrics: str
) -> None:
    for name in ("MEGATRON_OTEL_EXPORTER", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    set_env(monkeypatch, **env)
    settings = otel._config.read_settings()
    assert (settings.exporter_for("trace"), settings.exporter_for("metric")) == (traces, metrics)


@pytest.mark.parametrize("lean", [True, False], ids=["lean-path", "sdk-path"])
def test_own_providers_use_the_chosen_exporters(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, lean: bool
) -> None:
    monkeypatch.setattr(otel._lean_install, "ALLOWED", lean)
    monkeypatch.delenv("MEGATRON_OTEL_EXPORTER", raising=False)
    set_env(
        monkeypatch,
        MEGATRON_OTEL_ENABLED="1",
        MEGATRON_OTEL_OWN_PROVIDERS="1",
        MEGATRON_OTEL_METRICS_ENABLED="1",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
    )
    otel.configure()
    tracer_provider, meter_provider = otel._state.PROCESS.run.owned
    assert isinstance(tracer_provider, TracerProvider) and isinstance(meter_provider, MeterProvider)
    (processor,) = otel._state.PROCESS.run.processors
    # the lean recorder (_lean_recorder.py) or the runtime's own bounded batch processor (_batch.py)
    assert type(processor).__name__ == ("LeanRecorder" if lean else "BoundedBatchSpanProcessor")
    assert type(processor.exporter).__name__ == "ConsoleSpanExporter"
    settings = otel._config.read_settings()
    assert settings.exporter_for("metric") == "none"
    assert otel._export.otlp_exporter(settings, "metric", "Metric") is None  # no reader exports


def test_tracer_and_meter_carry_version_and_schema_url(otel: ModuleType) -> None:
    provider, exporter = in_memory(shutdown_on_exit=False)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    otel.configure(tracer_provider=provider, meter_provider=meters)
    otel.enable("job", tracer_provider=provider)
    span = otel.start_span("megatron.startup")
    assert span
    span.end()
    (finished,) = exporter.get_finished_spans()
    scope = finished.instrumentation_scope
    version = otel._version
    assert (scope.name, scope.version, scope.schema_url) == ("megatron", version.VERSION, version.SCHEMA_URL)
    assert version.SCHEMA_URL.startswith("https://") and version.VERSION in version.SCHEMA_URL


def test_version_is_the_generators() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    from codegen.otel_runtime import _version

    assert _version.VERSION == pyproject["project"]["version"]


def test_no_private_sdk_module_or_attribute() -> None:
    text = "\n".join(p.read_text() for p in sorted(RUNTIME.glob("*.py")))
    assert not re.search(r"opentelemetry[\w.]*\._\w", text)  # a private module of the SDK or API
    for name in ("_batch_processor", "_queue", "_ProxyMeterProvider", "_internal", "_metric_readers"):
        assert not re.search(rf"[\"'.]{name}\b", text.replace("self._queue", "")), name


class SlowExporter:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.exported: list[str] = []
        self.release = threading.Event()

    def export(self, spans):
        self.release.wait(self.seconds)
        self.exported += [s.name for s in spans]
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _spans(count: int):
    provider = TracerProvider(shutdown_on_exit=False)
    tracer = provider.get_tracer("t")
    out = []
    for i in range(count):
        span = tracer.start_span(f"s{i}")
        span.end()
        out.append(span)
    return out


def test_processor_bounds_its_queue_counts_drops_and_flushes(otel: ModuleType) -> None:
    cls = importlib.import_module(f"{otel.__name__}._batch").bounded_processor_class()
    exporter = SlowExporter(60.0)
    processor = cls(exporter, max_queue_size=4, schedule_delay_millis=10, max_export_batch_size=2)
    spans = _spans(12)
    for span in spans:
        processor.on_end(span)
    assert processor.queued() <= 4
    assert processor.dropped >= 12 - 4 - 2  # at most one batch in flight, four queued
    # the exporter is stuck (for 60 s): the flush gives up at its timeout, before any export returned
    assert processor.force_flush(200) is False
    assert exporter.exported == []
    exporter.release.set()
    assert processor.force_flush(5000) is True
    assert processor.queued() == 0
    assert len(exporter.exported) + processor.dropped == 12
    processor.shutdown(timeout_millis=1000)


def test_processor_shutdown_is_bounded_with_a_stuck_exporter(otel: ModuleType) -> None:
    cls = importlib.import_module(f"{otel.__name__}._batch").bounded_processor_class()

    class Stuck(SlowExporter):
        def shutdown(self) -> None:  # an exporter that ignores shutdown
            pass

    exporter = Stuck(60.0)
    processor = cls(exporter, max_queue_size=8, schedule_delay_millis=10, max_export_batch_size=8)
    for span in _spans(3):
        processor.on_end(span)
    processor.shutdown(timeout_millis=300)
    # it came back at its timeout, the export still stuck (it would return after 60 s)
    assert exporter.exported == []
    exporter.release.set()


def test_oldest_otel_constraints_differ_only_in_opentelemetry() -> None:
    """constraints-otel-oldest.txt (tox -e sdk-oldest) is constraints.txt with the oldest
    OpenTelemetry the instrumentation package admits; nothing else may drift but what that
    OpenTelemetry itself caps."""
    capped_by_oldest_otel = {"wrapt"}  # opentelemetry-instrumentation 0.48b0: wrapt<2

    def pins(name: str) -> dict[str, str]:
        lines = (REPO / name).read_text().splitlines()
        return dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))

    newest, oldest = pins("constraints.txt"), pins("constraints-otel-oldest.txt")

    def others(p: dict[str, str]) -> dict[str, str]:
        return {
            k: v
            for k, v in p.items()
            if not k.startswith("opentelemetry-") and k not in capped_by_oldest_otel
        }

    assert others(oldest) == others(newest)
    assert capped_by_oldest_otel <= oldest.keys() & newest.keys()
    floors = dict(r.split(">=", 1) for r in REQUIRES)
    for package in ("opentelemetry-api", "opentelemetry-sdk", "opentelemetry-instrumentation"):
        assert oldest[package].startswith(floors[package].removesuffix(".0")), package
