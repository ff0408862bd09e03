"""Export limits: exporter timeouts, queue sizes, the bounded shutdown and flush, span accounting.

No network: a stand-in for the OTLP/HTTP exporter module records how the runtime built its
exporters, and its exporters behave like a collector that never answers (``export`` blocks until
``shutdown``). The live-receiver tests in ``tests/megatron_cpu/test_otlp_export.py`` measure the
same bounds over the wire. Every test runs on both recording paths of the runtime's own providers:
the lean recorder (``_lean_recorder``, the default) and the SDK's batch span processor.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from types import ModuleType
from typing import ClassVar

import pytest
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support.lean_workload import set_env

MODULE = "opentelemetry.exporter.otlp.proto.http.{signal}_exporter"


class StuckExporter:
    """An OTLP exporter whose collector never answers: ``export`` blocks until ``shutdown``."""

    made: ClassVar[list[StuckExporter]] = []

    def __init__(self, **options: object) -> None:
        self.options = options
        self.released = threading.Event()
        self.exports = 0
        self.answered = 0  # exports that came back (the collector "answered" or shutdown released them)
        self.answered_at_shutdown: int | None = None
        StuckExporter.made.append(self)

    def export(self, batch: object, **kwargs: object) -> SpanExportResult:
        self.exports += 1
        self.released.wait(60)
        self.answered += 1
        return SpanExportResult.FAILURE

    def shutdown(self, **kwargs: object) -> None:
        if self.answered_at_shutdown is None:  # the first call (the SDK may shut it down twice)
            self.answered_at_shutdown = self.answered
        self.released.set()

    def force_flush(self, timeout_millis: float = 30000) -> bool:
        return True


class StuckMetricExporter(MetricExporter, StuckExporter):
    """The same for metrics (the metric reader needs the SDK's MetricExporter attributes)."""

    def __init__(self, **options: object) -> None:
        MetricExporter.__init__(self)
        StuckExporter.__init__(self, **options)

    def export(self, metrics_data: object, timeout_millis: float = 10_000, **kwargs: object) -> object:
        StuckExporter.export(self, metrics_data)
        return MetricExportResult.FAILURE

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.released.set()

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True


@pytest.fixture(autouse=True, params=["lean", "sdk"])
def recording_path(request: pytest.FixtureRequest, otel: ModuleType, monkeypatch: pytest.MonkeyPatch) -> str:
    """The runtime's own provider records lean, or (``_lean_install.ALLOWED`` off) through the SDK."""
    monkeypatch.setattr(otel._lean_install, "ALLOWED", request.param == "lean")
    return request.param


@pytest.fixture
def stuck(monkeypatch: pytest.MonkeyPatch) -> list[StuckExporter]:
    """OTLP over HTTP to a collector that never answers; spans only, every group."""
    StuckExporter.made = []
    for signal, kind, exporter in (
        ("trace", "Span", StuckExporter),
        ("metric", "Metric", StuckMetricExporter),
    ):
        module = ModuleType(MODULE.format(signal=signal))
        setattr(module, f"OTLP{kind}Exporter", exporter)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    set_env(
        monkeypatch,
        MEGATRON_OTEL_ENABLED="1",
        MEGATRON_OTEL_EXPORTER="otlp",
        MEGATRON_OTEL_SPAN_GROUPS="all",
        MEGATRON_OTEL_METRICS_ENABLED="0",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    return StuckExporter.made


def record(otel: ModuleType, count: int) -> None:
    for _ in range(count):
        span = otel.LAYER and otel.start_span("megatron.layer.forward")
        span and span.end()


def processor(otel: ModuleType):
    provider = otel._state.PROCESS.run.owned[0]  # the tracer provider (then the meter provider, if any)
    (bounded,) = otel._state.PROCESS.run.processors
    assert bounded in provider._active_span_processor._span_processors
    return bounded


# --- configuration -----------------------------------------------------------------------------


def test_defaults_come_from_the_specs(otel: ModuleType) -> None:
    limits = otel._config.read_settings(environ={}).export
    assert limits.export_timeout == 10 and not limits.export_timeout_given
    assert limits.flush_timeout == 5
    assert (limits.span_queue_size, limits.span_batch_size) == (2048, 512)
    assert (limits.span_schedule_delay_ms, limits.metric_export_interval_ms) == (5000, 60000)


# every limit a run sets, each away from its default
LIMITS = {
    "MEGATRON_OTEL_EXPORT_TIMEOUT_S": "2.5",
    "OTEL_BSP_MAX_QUEUE_SIZE": "64",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "16",
    "OTEL_BSP_SCHEDULE_DELAY": "250",
    "OTEL_METRIC_EXPORT_INTERVAL": "1500",
}


def test_processor_reader_and_exporters_built_with_the_configured_limits(
    otel: ModuleType, stuck: list[StuckExporter], monkeypatch: pytest.MonkeyPatch, recording_path: str
) -> None:
    set_env(monkeypatch, MEGATRON_OTEL_METRICS_ENABLED="1", **LIMITS)
    otel.configure()
    bounded = processor(otel)  # the lean recorder or the runtime's BoundedBatchSpanProcessor (_batch.py)
    tracer = type(otel._state.PROCESS.run.tracer).__name__
    assert tracer == ("LeanTracer" if recording_path == "lean" else "Tracer")
    assert (bounded.capacity, bounded.batch_size, bounded.delay) == (64, 16, 0.25)
    assert bounded.export_timeout == 2.5
    meters = otel._state.PROCESS.run.owned[1]
    # where the SDK keeps its readers differs between releases (the oldest admitted: _sdk_config)
    (reader,) = getattr(meters, "_metric_readers", None) or meters._sdk_config.metric_readers
    assert reader._export_interval_millis == 1500 and reader._export_timeout_millis == 2500
    assert [e.options for e in stuck] == [{"timeout": 2.5}, {"timeout": 2.5}]


def test_a_standard_otlp_timeout_is_honoured_unless_ours_is_set(
    otel: ModuleType, stuck: list[StuckExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    otel.configure()
    assert stuck[-1].options == {}  # the SDK reads OTEL_EXPORTER_OTLP_TIMEOUT itself
    monkeypatch.setenv("MEGATRON_OTEL_EXPORT_TIMEOUT_S", "1")
    otel.configure()
    assert stuck[-1].options == {"timeout": 1.0}


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, ["OTEL_BSP_MAX_QUEUE_SIZE='0'", "an integer > 0"]),
        ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "big"}, ["OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "> 0"]),
        (
            {"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "200"},
            ["OTEL_BSP_MAX_EXPORT_BATCH_SIZE=200", "at most OTEL_BSP_MAX_QUEUE_SIZE=100"],
        ),
        ({"OTEL_BSP_SCHEDULE_DELAY": "-5"}, ["OTEL_BSP_SCHEDULE_DELAY", "milliseconds > 0"]),
        ({"OTEL_METRIC_EXPORT_INTERVAL": "0"}, ["OTEL_METRIC_EXPORT_INTERVAL", "milliseconds > 0"]),
        ({"MEGATRON_OTEL_EXPORT_TIMEOUT_S": "0"}, ["MEGATRON_OTEL_EXPORT_TIMEOUT_S", "seconds > 0"]),
        ({"MEGATRON_OTEL_FLUSH_TIMEOUT_S": "soon"}, ["MEGATRON_OTEL_FLUSH_TIMEOUT_S", ">= 0"]),
    ],
)
def test_invalid_limits_fail_fast_naming_the_variable(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, settings: dict[str, str], expected: list[str]
) -> None:
    set_env(monkeypatch, **settings)
    with pytest.raises(ValueError) as info:
        otel.configure()
    for text in expected:
        assert text in str(info.value)


# --- a collector that never answers ----------------------------------------------------------


def test_shutdown_is_bounded_by_the_flush_timeout_and_counts_what_was_lost(
    otel: ModuleType,
    stuck: list[StuckExporter],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_env(monkeypatch, MEGATRON_OTEL_FLUSH_TIMEOUT_S="0.5", OTEL_BSP_SCHEDULE_DELAY="3600000")
    otel.configure()
    record(otel, 300)
    caplog.set_level(logging.WARNING)
    otel.shutdown()
    (exporter,) = stuck
    # the flush gave up at its timeout, no export having come back (one would after 60 s), and
    # the exporter was shut down: its retries (here: the wait) are abandoned
    assert exporter.answered_at_shutdown == 0
    (summary,) = [r.getMessage() for r in caplog.records if "still queued" in r.getMessage()]
    numbers = [int(n) for n in re.findall(r"(\d+) (?:spans dropped|lost|still)", summary)]
    assert sum(numbers) == 300 and numbers[0] == 0, summary
    assert "(0.5 s)" in summary


def test_a_full_queue_drops_new_spans_counts_them_and_logs_once(
    otel: ModuleType,
    stuck: list[StuckExporter],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_env(
        monkeypatch,
        OTEL_BSP_MAX_QUEUE_SIZE="8",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="4",
        MEGATRON_OTEL_FLUSH_TIMEOUT_S="0.2",
    )
    otel.configure()
    caplog.set_level(logging.WARNING)
    record(otel, 100)
    bounded = processor(otel)
    assert bounded.queued() <= 8
    # the batch thread took one batch of 4 into the stuck export (or has yet to)
    assert 100 - 8 - 4 <= bounded.dropped <= 100 - 8
    full = [r for r in caplog.records if "span queue is full" in r.getMessage()]
    assert len(full) == 1 and "(8 spans)" in full[0].getMessage()
    assert not [r for r in caplog.records if "Queue full" in r.getMessage()]  # the SDK's, per span
    otel.shutdown()
    (summary,) = [r.getMessage() for r in caplog.records if "spans dropped" in r.getMessage()]
    assert summary.startswith(f"telemetry: {bounded.dropped} spans dropped while the span queue")
    numbers = [int(n) for n in re.findall(r"(\d+) (?:spans dropped|lost|still)", summary)]
    assert sum(numbers) == 100, summary


def test_the_sigterm_flush_is_bounded_by_its_timeout(
    otel: ModuleType, stuck: list[StuckExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S", "0.3")
    otel.configure()
    record(otel, 50)
    state = otel._state.PROCESS
    called: list[int] = []
    monkeypatch.setattr(state, "previous_sigterm", lambda signum, frame: called.append(signum))
    otel._process._on_sigterm(15, None)
    # the handler came back while the collector had still not answered (it would after 60 s)
    assert [e.answered for e in stuck] == [0] * len(stuck)
    assert called == [15]  # then the previous handler ran


# --- batching ----------------------------------------------------------------------------------


class CountingExporter(StuckExporter):
    """A collector that answers at once; records each batch's size."""

    sizes: ClassVar[list[int]] = []

    def export(self, batch: object, **kwargs: object) -> SpanExportResult:
        CountingExporter.sizes.append(len(batch))  # type: ignore[arg-type]
        return SpanExportResult.SUCCESS


def test_spans_recorded_a_few_at_a_time_are_exported_in_full_batches(
    otel: ModuleType, stuck: list[StuckExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the training thread records, a batch goes when it is full, not whatever had arrived
    when the previous export returned (a few spans a request, each paying the HTTP client); the
    rest goes at the end of the run (or when the schedule delay runs out: an hour here)."""
    module = sys.modules[MODULE.format(signal="trace")]
    monkeypatch.setattr(module, "OTLPSpanExporter", CountingExporter)
    CountingExporter.sizes = []
    set_env(
        monkeypatch,
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="64",
        OTEL_BSP_MAX_QUEUE_SIZE="100000",
        OTEL_BSP_SCHEDULE_DELAY="3600000",
    )
    otel.configure()
    for _ in range(129):  # 1,290 spans, ten at a time, the export thread free in between
        record(otel, 10)
        time.sleep(0.001)
    otel.shutdown()
    sizes = CountingExporter.sizes
    assert sum(sizes) == 1290
    assert sizes == [64] * 20 + [10], sizes
