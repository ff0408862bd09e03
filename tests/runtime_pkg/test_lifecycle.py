"""Lifecycle spans (startup, training intervals), exit paths, ranks and failure isolation.

In-process, with the OpenTelemetry SDK's in-memory exporter; test_process_exit.py covers what
needs a process of its own (interpreter exit, SIGTERM, spawn).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType, SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from runtime_pkg_support import Rendered

from tests.support.lean_workload import enable_env

T0 = 1_700_000_000.0
TIMESTAMPS = {
    "job_start": T0 - 30,
    "launch_script_start": T0 - 20,
    "pre_srun": T0 - 10,
    "program_start": T0,
    "main_entry": T0 + 4,
    "pretrain_entry": T0 + 5,
}


def ns(seconds: float) -> int:
    return int(seconds * 1e9)


@pytest.fixture
def telemetry_on(otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """``otel`` on through the environment (every group), configured with ``provider`` (its spans go
    to ``exporter``)."""
    enable_env(monkeypatch)
    otel.configure(tracer_provider=provider)


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    (span,) = named(spans, name)
    return span


def run_training(otel: ModuleType, start: int, stop: int, save_interval: int | None) -> None:
    """The call sequence the instrumented train() makes."""
    otel.begin_training(start, save_interval)
    try:
        for iteration in range(start, stop):
            otel.train_iteration(iteration)
            span = otel.STEP and otel.start_span(
                "megatron.train.iteration", lambda: {"megatron.iteration": iteration}
            )
            try:
                pass
            finally:
                span and span.end()
    finally:
        otel.end_training()


# --- startup -----------------------------------------------------------------------------------


def test_startup_span_opens_and_closes_exactly_once(
    otel: ModuleType,
    sites: ModuleType,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enable_env(monkeypatch)
    assert otel.configure(tracer_provider=provider) == set(otel.GROUPS)
    otel.startup(TIMESTAMPS, lambda: {"megatron.model_type": "gpt"})
    otel.startup(TIMESTAMPS)  # open: ignored
    current = trace.get_current_span()
    assert current.is_recording() and current.name == "megatron.startup"
    assert sites.save([]) == "saved"  # a span opened during startup is its child
    assert not named(exporter.get_finished_spans(), "megatron.startup")
    otel.begin_training(0, 5)
    otel.startup(TIMESTAMPS)  # closed: still ignored
    otel.end_training()
    otel.shutdown()
    spans = exporter.get_finished_spans()
    startup = one(spans, "megatron.startup")
    assert startup.parent is None
    assert startup.start_time == ns(T0)
    assert startup.end_time is not None and startup.end_time >= ns(time.time() - 60)
    assert dict(startup.attributes or {}) == {
        "megatron.span_group": "job",
        "is_goodput_span": True,
        "megatron.model_type": "gpt",
    }
    assert one(spans, "megatron.checkpoint.save").parent.span_id == startup.context.span_id
    # the training interval opens after startup closed
    assert one(spans, "megatron.train").start_time >= startup.end_time


def test_startup_phases_are_backdated_children_and_pre_startup_a_root(
    otel: ModuleType,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enable_env(monkeypatch, MEGATRON_OTEL_JOB_START_TIME=str(T0 - 40))
    otel.configure(tracer_provider=provider)
    stamps = dict(TIMESTAMPS, job_start=None, pretrain_entry=None)  # None: not recorded
    otel.startup(stamps)
    otel.shutdown()
    spans = exporter.get_finished_spans()
    startup = one(spans, "megatron.startup")
    expected = {
        "megatron.startup.launch_script": (T0 - 20, T0 - 10),
        "megatron.startup.container_load": (T0 - 10, T0),
        "megatron.startup.imports": (T0, T0 + 4),
    }
    for name, (start, end) in expected.items():
        phase = one(spans, name)
        assert phase.parent is not None and phase.parent.span_id == startup.context.span_id
        assert (phase.start_time, phase.end_time) == (ns(start), ns(end))
        assert dict(phase.attributes or {}) == {"megatron.span_group": "job", "is_goodput_span": True}
    assert not named(spans, "megatron.startup.arg_parse")  # its end was missing
    pre = one(spans, "pre_startup")
    assert pre.parent is None and pre.context.trace_id != startup.context.trace_id
    # job_start from MEGATRON_OTEL_JOB_START_TIME, the call site's None not overriding it
    assert (pre.start_time, pre.end_time) == (ns(T0 - 40), ns(T0 - 20))


@pytest.mark.usefixtures("telemetry_on")
def test_startup_without_program_start_is_backdated_to_process_start(
    otel: ModuleType, exporter: InMemorySpanExporter
) -> None:
    otel.startup({})
    otel.shutdown()
    startup = one(exporter.get_finished_spans(), "megatron.startup")
    assert startup.start_time <= ns(otel._lifecycle._IMPORT_TIME)
    assert startup.start_time > ns(time.time() - 7 * 24 * 3600)


@pytest.mark.usefixtures("telemetry_on")
def test_startup_attributes_that_raise_are_logged_once(
    otel: ModuleType, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=otel.__name__):
        otel.startup(TIMESTAMPS, lambda: {"megatron.model_type": 1 // 0})
        otel.set_current_attributes(lambda: {"x": [].pop()})
        otel.set_current_attributes(lambda: {"x": [].pop()})
    otel.shutdown()
    startup = one(exporter.get_finished_spans(), "megatron.startup")
    assert "megatron.model_type" not in (startup.attributes or {})
    assert len([r for r in caplog.records if r.name == otel.__name__]) == 2


# --- training intervals ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "stop", "save_interval", "interval_starts"),
    [
        (0, 10, 3, [0, 3, 6, 9]),
        (0, 9, 3, [0, 3, 6]),
        (7, 13, 3, [7, 9, 12]),  # resume from a non-zero iteration
        (1000, 1001, 500, [1000]),
        (0, 7, None, [0]),
        (0, 7, 0, [0]),
        (4, 7, -1, [4]),
        (0, 1, 1, [0]),
        (0, 3, 1, [0, 1, 2]),
    ],
)
@pytest.mark.usefixtures("telemetry_on")
def test_reroots_exactly_at_save_interval_boundaries(
    otel: ModuleType,
    exporter: InMemorySpanExporter,
    start: int,
    stop: int,
    save_interval: int | None,
    interval_starts: list[int],
) -> None:
    otel.startup(TIMESTAMPS)
    assert not otel.in_training()
    run_training(otel, start, stop, save_interval)
    assert not otel.in_training()
    spans = exporter.get_finished_spans()
    intervals = sorted(named(spans, "megatron.train"), key=lambda s: s.start_time)
    assert [s.attributes["megatron.iteration"] for s in intervals] == interval_starts
    every = save_interval if save_interval and save_interval > 0 else None
    assert [s.attributes["megatron.trace_interval"] for s in intervals] == [
        i // every if every else 0 for i in interval_starts
    ]
    startup = one(spans, "megatron.startup")
    previous = startup
    for interval in intervals:
        assert interval.parent is None
        assert interval.context.trace_id != previous.context.trace_id
        assert [link.context.span_id for link in interval.links] == [previous.context.span_id]
        assert interval.attributes["is_goodput_span"] is True
        previous = interval
    # every iteration span is a child of the interval that was current
    for step in named(spans, "megatron.train.iteration"):
        iteration = step.attributes["megatron.iteration"]
        owner = [s for s in intervals if s.attributes["megatron.iteration"] <= iteration][-1]
        assert step.parent is not None and step.parent.span_id == owner.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN


@pytest.mark.usefixtures("telemetry_on")
def test_interval_without_startup_has_no_link_and_train_iteration_outside_training_is_ignored(
    otel: ModuleType, exporter: InMemorySpanExporter
) -> None:
    otel.train_iteration(5)
    otel.end_training()
    assert exporter.get_finished_spans() == ()
    run_training(otel, 0, 2, 1)
    first, second = sorted(named(exporter.get_finished_spans(), "megatron.train"), key=lambda s: s.start_time)
    assert first.links == ()
    assert second.links[0].context.span_id == first.context.span_id


# --- exit paths --------------------------------------------------------------------------------


def pretrain_like(otel: ModuleType, failure: BaseException | None) -> None:
    """startup, a training loop that may fail, as the generated pretrain()/train() do."""
    otel.startup(TIMESTAMPS)
    otel.begin_training(0, 2)
    try:
        for iteration in range(5):
            otel.train_iteration(iteration)
            if failure is not None and iteration == 3:
                raise failure
    finally:
        otel.end_training()


@pytest.mark.usefixtures("telemetry_on")
def test_exception_escaping_training_ends_and_exports_spans(
    otel: ModuleType, exporter: InMemorySpanExporter
) -> None:
    with pytest.raises(RuntimeError, match="diverged"):
        pretrain_like(otel, RuntimeError("diverged"))
    spans = exporter.get_finished_spans()
    assert one(spans, "megatron.startup").status.status_code is StatusCode.UNSET
    intervals = sorted(named(spans, "megatron.train"), key=lambda s: s.start_time)
    assert len(intervals) == 2
    assert intervals[0].status.status_code is StatusCode.UNSET
    assert intervals[-1].status.status_code is StatusCode.ERROR
    assert intervals[-1].status.description == "RuntimeError"
    assert [e.name for e in intervals[-1].events] == ["exception"]
    assert not otel.in_training()
    assert trace.get_current_span() is trace.INVALID_SPAN


@pytest.mark.usefixtures("telemetry_on")
@pytest.mark.parametrize(("code", "error"), [(0, False), (None, False), (3, True)])
def test_early_exit_through_generated_finally_ends_spans(
    otel: ModuleType, exporter: InMemorySpanExporter, code: int | None, error: bool
) -> None:
    with pytest.raises(SystemExit):
        pretrain_like(otel, SystemExit(code))
    intervals = named(exporter.get_finished_spans(), "megatron.train")
    assert len(intervals) == 2 and all(s.end_time for s in intervals)
    last = max(intervals, key=lambda s: s.start_time)
    assert (last.status.status_code is StatusCode.ERROR) is error
    assert trace.get_current_span() is trace.INVALID_SPAN


@pytest.mark.usefixtures("telemetry_on")
def test_shutdown_ends_open_spans_and_happens_once(
    otel: ModuleType,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flushes: list[int] = []
    monkeypatch.setattr(provider, "force_flush", lambda *a: flushes.append(1) or True)
    otel.startup(TIMESTAMPS)
    otel.begin_training(0, None)
    otel.shutdown()
    otel.shutdown()
    assert flushes == [1]
    assert len(named(exporter.get_finished_spans(), "megatron.train")) == 1
    assert otel.enabled_groups() == frozenset() and not otel.in_training()


class SlowBatch(BatchSpanProcessor):
    """Exports only when flushed (the schedule delay outlasts the test)."""

    def __init__(self, exporter: SpanExporter) -> None:
        super().__init__(exporter, schedule_delay_millis=3_600_000, max_export_batch_size=512)


def test_exit_hooks_installed_once_across_two_pretrain_runs_and_second_run_flushes(
    rendered: Rendered,
    exit_hooks: dict[str, list[object]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    otel = rendered.import_runtime()
    enable_env(monkeypatch, MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S="2")
    runs: list[InMemorySpanExporter] = []
    for _ in range(2):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(SlowBatch(exporter))
        runs.append(exporter)
        otel.configure(tracer_provider=provider)
        assert otel.first_time("first_iteration") and not otel.first_time("first_iteration")
        otel.startup(TIMESTAMPS)
        run_training(otel, 0, 4, 2)
        assert exporter.get_finished_spans() == ()  # batched, not flushed yet
        otel.reset()  # Megatron's destroy_global_state()
        names = [s.name for s in exporter.get_finished_spans()]
        assert names.count("megatron.startup") == 1
        assert names.count("megatron.train") == 2
    assert exit_hooks["atexit"] == [otel._process._at_exit]
    assert exit_hooks["sigterm"] == [otel._process._on_sigterm]


# --- ranks -------------------------------------------------------------------------------------


class CountingTracerProvider(TracerProvider):
    def __init__(self) -> None:
        super().__init__(shutdown_on_exit=False)
        self.tracers = 0

    def get_tracer(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.tracers += 1
        return super().get_tracer(*args, **kwargs)


@pytest.mark.parametrize(("rank", "export_rank"), [(0, "-1"), (2, "-1"), (3, "0"), (1, "2")])
def test_non_exporting_ranks_create_no_spans(
    otel: ModuleType,
    sites: ModuleType,
    exporter: InMemorySpanExporter,
    exit_hooks: dict[str, list[object]],
    monkeypatch: pytest.MonkeyPatch,
    rank: int,
    export_rank: str,
) -> None:
    enable_env(monkeypatch, RANK=str(rank), WORLD_SIZE="4", MEGATRON_OTEL_EXPORT_RANK=export_rank)
    monkeypatch.setenv("MEGATRON_OTEL_METRICS_ENABLED", "1")
    provider = CountingTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meters: list[object] = []
    meter_provider = SimpleNamespace(get_meter=lambda *a, **k: meters.append(a))
    assert otel.configure(tracer_provider=provider, meter_provider=meter_provider) == frozenset()
    assert otel.enabled_groups() == frozenset() and otel.METRICS is False
    assert (otel.JOB, otel.CHECKPOINT, otel.STEP, otel.LAYER) == (False,) * 4
    otel.startup(TIMESTAMPS)
    run_training(otel, 0, 5, 2)
    assert sites.save([]) == "saved" and sites.Layer().forward(1) == 2
    otel.METRICS and otel.record_metrics(lambda: {"megatron.training.loss": 1.0})
    assert otel.in_context(len) is len
    assert otel.worker_bootstrap() == {"enabled": False}
    otel.shutdown()
    assert exporter.get_finished_spans() == ()
    assert provider.tracers == 0 and meters == []
    assert exit_hooks == {"atexit": [], "sigterm": []}


def test_exporting_rank_is_the_last_by_default_or_the_configured_one(
    otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    enable_env(monkeypatch, RANK="3", WORLD_SIZE="4")
    assert otel.configure(tracer_provider=provider) == set(otel.GROUPS)
    monkeypatch.setenv("MEGATRON_OTEL_EXPORT_RANK", "3")
    assert otel.configure(tracer_provider=provider) == set(otel.GROUPS)
    monkeypatch.setenv("MEGATRON_OTEL_EXPORT_RANK", "0")
    assert otel.configure(tracer_provider=provider) == frozenset()


def test_rank_comes_from_torch_distributed_when_initialized(
    otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    enable_env(monkeypatch, RANK="0", WORLD_SIZE="1")  # stale environment
    dist = SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        get_rank=lambda: 1,
        get_world_size=lambda: 8,
    )
    monkeypatch.setitem(__import__("sys").modules, "torch.distributed", dist)
    assert otel._config.rank_and_world() == (1, 8)
    assert otel.configure(tracer_provider=provider) == frozenset()
    dist.get_rank = lambda: 7
    assert otel.configure(tracer_provider=provider) == set(otel.GROUPS)


# --- never raises into training ----------------------------------------------------------------


class RaisingExporter(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise ConnectionError("collector unreachable")

    def shutdown(self) -> None:
        raise ConnectionError("collector unreachable")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        raise ConnectionError("collector unreachable")


def test_exporter_that_raises_does_not_stop_the_caller(
    otel: ModuleType, sites: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    enable_env(monkeypatch)
    exporter = RaisingExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(SlowBatch(RaisingExporter()))
    otel.configure(tracer_provider=provider)
    otel.startup(TIMESTAMPS)
    assert sites.save([]) == "saved"
    assert sites.Layer().forward(1) == 2
    run_training(otel, 0, 4, 2)
    otel.shutdown()
    otel.reset()
    assert exporter.calls > 5


def test_failing_provider_does_not_stop_the_caller(
    otel: ModuleType, sites: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    enable_env(monkeypatch)

    class BrokenTracer:
        def start_span(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise RuntimeError("broken tracer")

    provider = SimpleNamespace(get_tracer=lambda *a, **k: BrokenTracer(), force_flush=lambda: 1 // 0)
    otel.configure(tracer_provider=provider)
    otel.startup(TIMESTAMPS)
    assert sites.save([]) == "saved"
    run_training(otel, 0, 3, 1)
    otel.shutdown()


# --- context helpers ---------------------------------------------------------------------------


def test_in_context_runs_in_a_copy_of_the_callers_context(
    otel: ModuleType,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def build(index: int) -> int:
        span = otel.LAYER and otel.start_span("megatron.layer.mlp")
        span and span.end()
        return index

    assert otel.in_context(build) is build  # off: fn itself
    enable_env(monkeypatch)
    otel.configure(tracer_provider=provider)
    outer = otel.start_span("megatron.checkpoint.save")
    wrapped = otel.in_context(build)
    with ThreadPoolExecutor(2) as pool:
        assert sorted(pool.map(wrapped, range(4))) == [0, 1, 2, 3]
    outer.end()
    spans = exporter.get_finished_spans()
    parent = one(spans, "megatron.checkpoint.save")
    children = named(spans, "megatron.layer.mlp")
    assert len(children) == 4
    assert all(c.parent.span_id == parent.context.span_id for c in children)


def test_set_current_attributes_stamps_the_current_span(
    otel: ModuleType,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    otel.set_current_attributes(lambda: calls.append(1) or {"nvrx.call_idx": 1})
    assert calls == []  # off: not evaluated
    enable_env(monkeypatch)
    otel.configure(tracer_provider=provider)
    span = otel.start_span("megatron.checkpoint.save")
    otel.set_current_attributes(lambda: {"nvrx.call_idx": 4})
    span.end()
    assert one(exporter.get_finished_spans(), "megatron.checkpoint.save").attributes["nvrx.call_idx"] == 4
