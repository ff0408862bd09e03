"""Runtime defects a real run exposed (issue 10, item 4), each with the test that reproduced it."""

from __future__ import annotations

import json
import random
import re
import signal
import sys
from collections.abc import Sequence
from types import ModuleType, SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from runtime_pkg_support import Rendered, run_script, span_names

from tests.support.lean_workload import enable_env
from tests.support.processors import counting_provider, in_memory, metric_points

STAMPS = {"program_start": 1_700_000_000.0, "main_entry": 1_700_000_004.0}


def names(spans: Sequence[ReadableSpan]) -> list[str]:
    return sorted(s.name for s in spans)


def batched() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider that exports only when flushed (a batch processor with a very long delay)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=3_600_000))
    return provider, exporter


def pretrain(otel: ModuleType, provider: TracerProvider | None = None) -> None:
    """What one pretrain() does with the runtime, ending with an explicit shutdown."""
    otel.configure(tracer_provider=provider)
    otel.startup(STAMPS)
    otel.begin_training(0, 2)
    for iteration in range(3):
        otel.train_iteration(iteration)
        span = otel.STEP and otel.start_span("megatron.train.iteration")
        span and span.end()
    otel.end_training()
    otel.shutdown()


# --- 1. shutdown() then configure(): a fresh run ---------------------------------------------


def test_configure_after_shutdown_records_and_exports_a_fresh_run(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    enable_env(monkeypatch)
    first, first_exporter = batched()
    pretrain(otel, first)
    assert names(first_exporter.get_finished_spans()).count("megatron.startup") == 1
    second, second_exporter = batched()
    pretrain(otel, second)  # a second pretrain() in the same process
    spans = second_exporter.get_finished_spans()
    assert names(spans).count("megatron.startup") == 1  # a startup span again
    assert names(spans).count("megatron.train") == 2  # intervals [0, 2) and [2, 3)
    assert names(spans).count("megatron.train.iteration") == 3
    assert len(first_exporter.get_finished_spans()) == len(spans)  # nothing went to the old one


# --- 5. a RecursionError inside start_span leaves no span open -------------------------------


def _depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    return depth


def test_recursion_error_inside_start_span_leaves_no_sdk_span_open(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    enable_env(monkeypatch)
    provider, counting = counting_provider()
    otel.configure(tracer_provider=provider)
    limit = sys.getrecursionlimit()
    failed = 0
    try:
        # Move the recursion limit across start_span's own calls: it hits at every depth inside.
        for headroom in range(1, 120):
            try:
                sys.setrecursionlimit(_depth() + headroom)
            except RecursionError:  # below the current depth
                continue
            try:
                span = otel.start_span("megatron.checkpoint.save")
            except RecursionError:
                span = None
            finally:
                sys.setrecursionlimit(limit)
            failed += span is None
            span and span.end()
            assert counting.started == counting.ended, headroom
            assert not trace.get_current_span().is_recording(), headroom  # context restored
    finally:
        sys.setrecursionlimit(limit)
    assert failed  # the limit did hit inside start_span
    assert counting.started  # and spans did start past it


@pytest.mark.parametrize("where", ["set_span_in_context", "attach"])
def test_recursion_error_after_the_sdk_span_started_ends_it(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The SDK span exists once tracer.start_span returns: an error past that point ends it."""
    enable_env(monkeypatch)
    provider, counting = counting_provider()
    otel.configure(tracer_provider=provider)
    module = {"attach": otel._spans.otel_context, "set_span_in_context": otel._spans.otel_trace}

    def too_deep(*args: object, **kwargs: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    with monkeypatch.context() as patch:
        patch.setattr(module[where], where, too_deep)
        assert otel.start_span("megatron.checkpoint.save") is None  # never raises
    assert counting.started == 1 and counting.ended == 1
    assert not trace.get_current_span().is_recording()
    assert otel._state.PROCESS.run.open_spans.stack == []
    span = otel.start_span("megatron.checkpoint.save")  # and the next one records normally
    assert span is not None
    span.end()
    assert counting.started == counting.ended == 2


class Deep(SpanProcessor):
    """A span processor whose on_start runs deeper than the processor before it."""

    def on_start(self, span: object, parent_context: object = None) -> None:
        _deeper(15)


def _deeper(n: int) -> int:
    return _deeper(n - 1) if n else 0


def test_recursion_error_in_a_later_processors_on_start_ends_the_span_it_started(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's start_span raises after the first processor's on_start saw the span start: the
    runtime finds that span (the SDK's start_span frame in the traceback) and ends it."""
    enable_env(monkeypatch)
    provider, counting = counting_provider(Deep())
    otel.configure(tracer_provider=provider)
    limit = sys.getrecursionlimit()
    inside = 0  # start_span calls that failed after the span started
    try:
        for headroom in range(1, 150):
            try:
                sys.setrecursionlimit(_depth() + headroom)
            except RecursionError:
                continue
            before = counting.started
            try:
                span = otel.start_span("megatron.checkpoint.save")
            finally:
                sys.setrecursionlimit(limit)
            inside += span is None and counting.started > before
            span and span.end()
            assert counting.started == counting.ended, headroom
            assert not trace.get_current_span().is_recording(), headroom
    finally:
        sys.setrecursionlimit(limit)
    assert inside  # the limit did hit after the first on_start
    assert otel._state.PROCESS.run.open_spans.stack == []


# --- 6. ids from os.urandom; a programmatic enable() before configure() -----------------------


def test_own_tracer_provider_ids_do_not_follow_pythons_seeded_random(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Megatron seeds ``random`` with --seed: two jobs with the same seed must not share ids."""
    enable_env(monkeypatch)
    monkeypatch.setenv("MEGATRON_OTEL_EXPORTER", "none")  # the runtime's own provider, no export
    ids = []
    for _ in range(2):
        otel.configure()
        random.seed(1234)
        span = otel.start_span("megatron.checkpoint.save")
        assert span is not None
        context = trace.get_current_span().get_span_context()
        ids.append((context.trace_id, context.span_id))
        span.end()
        otel.reset()
    assert ids[0][0] != ids[1][0] and ids[0][1] != ids[1][1]


def test_programmatic_enable_before_configure_is_kept(
    otel: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    """A script that calls enable() itself, then pretrain() without --otel-enabled."""
    provider, exporter = in_memory(shutdown_on_exit=False)
    assert otel.enable("checkpoint", tracer_provider=provider) == {"checkpoint"}
    with caplog.at_level("INFO"):
        assert otel.configure(SimpleNamespace(otel_enabled=False)) == {"checkpoint"}
    assert "enable()" in caplog.text  # said so, once
    assert otel.enabled_groups() == {"checkpoint"}
    span = otel.CHECKPOINT and otel.start_span("megatron.checkpoint.save")
    assert span
    span.end()
    assert names(exporter.get_finished_spans()) == ["megatron.checkpoint.save"]
    otel.disable()  # disable() hands control back to configure()
    assert otel.configure(SimpleNamespace(otel_enabled=False)) == frozenset()


# --- 3. a global provider the application set is used, not replaced ----------------------------


@pytest.fixture
def global_providers(monkeypatch: pytest.MonkeyPatch) -> tuple[InMemorySpanExporter, object]:
    """An SDK TracerProvider and MeterProvider set globally (as NeMo does), restored afterwards."""
    import opentelemetry.metrics._internal as metrics_internal
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=3_600_000))
    reader = InMemoryMetricReader()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    monkeypatch.setattr(metrics_internal, "_METER_PROVIDER", MeterProvider([reader], shutdown_on_exit=False))
    return exporter, reader


def test_a_global_provider_set_by_the_application_is_used_and_flushed_not_replaced(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, global_providers: tuple
) -> None:
    exporter, reader = global_providers
    # the console exporter would print if it were used
    enable_env(monkeypatch, MEGATRON_OTEL_METRICS_ENABLED="1", MEGATRON_OTEL_EXPORTER="console")
    otel.configure()
    otel.startup(STAMPS)
    otel.begin_training(0, None)
    otel.record_metrics(lambda: {"megatron.training.loss": 2.5})
    otel.end_training()
    otel.shutdown()  # flushes the application's provider, never shuts it down
    assert "megatron.train" in names(exporter.get_finished_spans())
    assert "megatron.training.loss" in metric_points(reader)
    assert trace.get_tracer_provider().get_tracer("app").start_span("x").is_recording()


def test_own_providers_switch_forces_the_runtimes_providers(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, global_providers: tuple
) -> None:
    exporter, _ = global_providers
    enable_env(monkeypatch, MEGATRON_OTEL_EXPORTER="none", MEGATRON_OTEL_OWN_PROVIDERS="1")
    otel.configure()
    otel.startup(STAMPS)
    otel.begin_training(0, None)
    otel.end_training()
    owned = list(otel._state.PROCESS.run.owned)  # shutdown() replaces the run with an ended one
    otel.shutdown()
    trace.get_tracer_provider().force_flush()
    assert exporter.get_finished_spans() == ()
    assert len(owned) == 1  # the runtime built (and shut down) its own
    assert owned[0] is not trace.get_tracer_provider()
    assert otel._state.PROCESS.run.ended and otel._state.PROCESS.run.owned == []


# --- 2. fork safety ----------------------------------------------------------------------------

FORK_TARGET = """\
import importlib


def write(module):
    otel = importlib.import_module(module)
    span = otel.CHECKPOINT and otel.start_span("megatron.checkpoint.save.io_write")
    span and span.end()
"""


def test_forked_children_record_nothing_unless_set_up_as_workers_and_never_reexport(
    rendered: Rendered,
) -> None:
    (rendered.root / "fork_target.py").write_text(FORK_TARGET, encoding="utf-8")
    body = f"""\
    import multiprocessing
    import fork_target

    otel.configure()
    otel.startup(STAMPS)
    otel.begin_training(0, None)
    otel.train_iteration(0)
    outer = otel.start_span("megatron.train.iteration")
    ctx = multiprocessing.get_context("fork")
    # the async checkpoint worker: set up as a worker, it exports its own spans only
    worker = ctx.Process(target=otel.in_worker(fork_target.write), args=({rendered.project.runtime.module!r},))
    worker.start()
    worker.join(60)
    assert worker.exitcode == 0, worker.exitcode
    # a DataLoader-like child: records nothing, and exits through atexit
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        span = otel.STEP and otel.start_span("megatron.train.iteration")
        print("CHILD RECORDS", bool(span), sorted(otel.enabled_groups()), flush=True)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    outer.end()
    otel.end_training()
    """
    result = run_script(rendered, body)
    assert result.returncode == 0, result.stderr
    names = span_names(result.stdout)
    span_ids = re.findall(r'^        "span_id": "(0x[0-9a-f]+)"', result.stdout, re.MULTILINE)
    assert len(span_ids) == len(set(span_ids)) == len(names)
    assert "CHILD RECORDS False []" in result.stdout
    assert sorted(names).count("megatron.train") == 1, names
    assert names.count("megatron.train.iteration") == 1, names
    assert names.count("megatron.startup") == 1, names
    assert names.count("megatron.checkpoint.save.io_write") == 1, names


# --- 4. SIGTERM --------------------------------------------------------------------------------


def exported(stdout: str) -> list[dict]:
    """The span objects ConsoleSpanExporter printed."""
    decoder, spans, at = json.JSONDecoder(), [], stdout.find("{")
    while at != -1:
        span, end = decoder.raw_decode(stdout, at)
        spans.append(span)
        at = stdout.find("{", end)
    return spans


SIGTERM_RUN = """\
import threading

otel.configure()
otel.startup(STAMPS)
otel.begin_training(0, 10)
otel.train_iteration(0)
iteration = otel.start_span("megatron.train.iteration")
started, release = threading.Event(), threading.Event()

def save():
    span = otel.start_span("megatron.checkpoint.save")
    started.set()
    release.wait()
    span and span.end()

saver = threading.Thread(target=save, daemon=True)
saver.start()
started.wait()
"""


def test_sigterm_ends_every_open_span_of_every_thread_with_an_error_status(
    rendered: Rendered,
) -> None:
    body = SIGTERM_RUN + "os.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(30)\n"
    result = run_script(rendered, body, env={"MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S": "5"})
    assert result.returncode == -signal.SIGTERM, result.stderr
    spans = {s["name"]: s for s in exported(result.stdout)}
    for name in ("megatron.train", "megatron.train.iteration", "megatron.checkpoint.save"):
        assert spans[name]["status"]["status_code"] == "ERROR", name  # the other thread's too
        assert "SIGTERM" in spans[name]["status"]["description"], name


def test_sigterm_with_a_handler_that_returns_keeps_the_run_going(rendered: Rendered) -> None:
    """Megatron's --exit-signal-handler only sets a flag: training saves a checkpoint and exits."""
    body = (
        "received = []\n"
        "signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))\n"
        + SIGTERM_RUN
        + """\
os.kill(os.getpid(), signal.SIGTERM)
while not received:
    time.sleep(0.01)
release.set()
saver.join()
iteration.end()
otel.train_iteration(1)
exit_save = otel.start_span("megatron.checkpoint.save")  # the save on the way out
exit_save.end()
otel.end_training()
sys.exit(0)
"""
    )
    result = run_script(rendered, body, env={"MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S": "5"})
    assert result.returncode == 0, result.stderr
    spans = exported(result.stdout)
    (interval,) = [s for s in spans if s["name"] == "megatron.train"]
    saves = [s for s in spans if s["name"] == "megatron.checkpoint.save"]
    assert len(saves) == 2  # the thread's (a root: threads start with an empty context) and:
    exit_save = max(saves, key=lambda s: s["end_time"])
    assert exit_save["parent_id"] == interval["context"]["span_id"]  # under the open interval
    assert all(s["end_time"] <= interval["end_time"] for s in saves)
    assert all(s["status"]["status_code"] == "UNSET" for s in spans), spans
    assert any(e["name"] == "SIGTERM" for e in interval["events"])  # the signal is on record


def test_sigterm_with_a_handler_that_raises_ends_and_flushes_then_propagates(
    rendered: Rendered,
) -> None:
    body = (
        "class Terminated(Exception):\n    pass\n\n"
        "def previous(signum, frame):\n"
        "    print('previous handler ran', flush=True)\n"
        "    raise Terminated()\n\n"
        "signal.signal(signal.SIGTERM, previous)\n"
        + SIGTERM_RUN
        + """\
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
except Terminated:
    print("caught", flush=True)
    os._exit(7)  # no atexit: whatever was exported, the SIGTERM handler exported
"""
    )
    result = run_script(rendered, body, env={"MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S": "5"})
    assert result.returncode == 7, result.stderr
    assert result.stdout.index("previous handler ran") < result.stdout.index("{")
    spans = {
        s["name"]: s for s in exported(result.stdout.split("caught")[0].replace("previous handler ran", ""))
    }
    assert {"megatron.startup", "megatron.train", "megatron.train.iteration"} <= set(spans)
    assert "megatron.checkpoint.save" in spans
    assert all(
        spans[n]["status"]["status_code"] == "ERROR"
        for n in ("megatron.train", "megatron.train.iteration", "megatron.checkpoint.save")
    )
