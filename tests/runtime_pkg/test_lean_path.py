"""The lean recording path (``_lean_span``, ``_lean_tracer``, ``_lean_recorder``) against the SDK path: the same spans, field by field.

The runtime's own provider records lean unless ``_lean_install.ALLOWED`` is off (then through the SDK's
tracer and batch processor, as a program-set provider does). One workload runs on each path and
exports to an in-memory exporter standing in for OTLP: lifecycle spans with their links,
statement-site spans with call-site attributes (one of them invalid, dropped by the SDK's
validation), attributes set on the current span and stamped, an exception escaping a span, a
foreign tracer's span inside a taxonomy span and a taxonomy span inside it, a taxonomy span inside
a sampled-out foreign span, spans of a second thread. Everything but ids and times must match.
"""

from __future__ import annotations

import os
import random
import threading
from types import ModuleType

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from tests.support.lean_workload import normalized, own_provider_exporting_to, workload
from tests.support.processors import in_memory


def run(otel: ModuleType, monkeypatch: pytest.MonkeyPatch, lean: bool) -> list[ReadableSpan]:
    exporter = own_provider_exporting_to(otel, monkeypatch, lean)
    foreign_provider, foreign_exporter = in_memory()
    muted_provider = TracerProvider(sampler=ALWAYS_OFF)
    otel.configure()
    expected = "LeanTracer" if lean else "Tracer"
    assert type(otel._state.PROCESS.run.tracer).__name__ == expected
    workload(otel, foreign_provider.get_tracer("foreign"), muted_provider.get_tracer("muted"))
    otel.shutdown()  # flushes the runtime's own provider
    spans = list(exporter.get_finished_spans()) + list(foreign_exporter.get_finished_spans())
    return sorted(spans, key=lambda s: s.start_time or 0)


def test_the_lean_path_exports_what_the_sdk_path_exports_field_by_field(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = normalized(run(otel, monkeypatch, lean=False))
    otel.reset()
    lean = normalized(run(otel, monkeypatch, lean=True))
    assert len(lean) == len(sdk) == 20
    for lean_span, sdk_span in zip(lean, sdk):
        assert lean_span == sdk_span
    # what the workload exercises is really there
    names = [s["name"] for s in lean]
    assert names.count("megatron.train") == 2 and names.count("foreign.op") == 3
    assert "muted.op" not in names and names.count("megatron.checkpoint.save") == 4
    failing = [s for s in lean if s["status"][0].name == "ERROR"]
    assert len(failing) == 3 and all(s["events"][0][0] == "exception" for s in failing)
    mlp = next(s for s in lean if s["name"] == "megatron.layer.mlp")
    assert mlp["attributes"]["sizes"] == (1, 2) and mlp["attributes"].get("invalid") is None
    assert mlp["attributes"]["megatron.current"] == "set"
    assert mlp["attributes"]["megatron.stamped"] == (3, 4)


def test_foreign_spans_and_taxonomy_spans_parent_each_other_on_the_lean_path(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = run(otel, monkeypatch, lean=True)
    by_id = {s.context.span_id: s for s in spans}

    def parent(span: ReadableSpan) -> str | None:
        return by_id[span.parent.span_id].name if span.parent is not None else None

    foreign = [s for s in spans if s.name == "foreign.op"]
    assert [parent(s) for s in foreign] == ["megatron.layer.forward"] * 3
    mlp = [s for s in spans if s.name == "megatron.layer.mlp"]
    assert [parent(s) for s in mlp] == ["foreign.op"] * 3  # none inside the sampled-out span
    # a taxonomy span in a foreign span shares its trace
    assert all(s.context.trace_id == by_id[s.parent.span_id].context.trace_id for s in mlp)
    # the three failing spans in the step; the fourth from another thread, a root
    saves = [s for s in spans if s.name == "megatron.checkpoint.save"]
    assert [parent(s) for s in saves] == ["megatron.train.iteration"] * 3 + [None]
    train = [s for s in spans if s.name == "megatron.train"]
    assert parent(next(s for s in spans if s.name == "megatron.train.iteration")) == "megatron.train"
    assert [len(s.links) for s in train] == [1, 1]  # to the startup span, then the first interval


def test_spans_started_with_a_program_provider_take_the_sdk_path(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, exporter = in_memory()
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", "1")
    monkeypatch.setenv("MEGATRON_OTEL_SPAN_GROUPS", "all")
    monkeypatch.setenv("MEGATRON_OTEL_METRICS_ENABLED", "0")
    otel.configure(tracer_provider=provider)
    assert type(otel._state.PROCESS.run.tracer).__name__ == "Tracer"
    span = otel.start_span("megatron.layer.forward")
    assert span is not None
    span.end()
    assert [s.name for s in exporter.get_finished_spans()] == ["megatron.layer.forward"]


def test_ids_ignore_the_seeded_random_module_and_are_reseeded_after_fork(otel: ModuleType) -> None:
    ids = otel._ids
    random.seed(7)
    first = (ids.span_id(), ids.trace_id())
    random.seed(7)
    assert (ids.span_id(), ids.trace_id()) != first
    assert ids.span_id() > 0 and ids.trace_id() > 0
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork on this platform: the after-fork reseed is not exercised")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, f"{ids.span_id()} {ids.trace_id()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = tuple(int(v) for v in os.read(read, 200).split())
    os.close(read)
    # without the reseed the child's next ids would be the parent's next ids
    assert child != (ids.span_id(), ids.trace_id())


def test_a_lean_span_is_a_complete_api_span(otel: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = own_provider_exporting_to(otel, monkeypatch, lean=True)
    otel.configure()
    started = otel.start_span("megatron.layer.forward")
    assert started is not None
    current = trace.get_current_span()
    assert current.is_recording() and current.get_span_context().is_valid
    current.update_name("megatron.layer.forward")
    current.add_event("note", {"k": 1})
    current.set_status(trace.Status(trace.StatusCode.OK))
    current.set_status(trace.Status(trace.StatusCode.ERROR, "ignored after OK"))
    started.end()
    assert not current.is_recording()
    current.set_attribute("late", 1)  # ignored, as the SDK ignores it
    otel.shutdown()
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is trace.StatusCode.OK
    assert [e.name for e in span.events] == ["note"] and "late" not in span.attributes


def test_a_forked_child_drops_the_parents_buffered_spans(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork on this platform")
    exporter = own_provider_exporting_to(otel, monkeypatch, lean=True)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # nothing exported before the fork
    otel.configure()
    span = otel.start_span("megatron.layer.forward")
    assert span is not None
    span.end()
    (recorder,) = otel._state.PROCESS.run.processors
    assert recorder.queued() == 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            recorder.force_flush(1000)
            os.write(write, f"{recorder.queued()} {len(exporter.get_finished_spans())}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 100).decode() == "0 0"
    os.close(read)
    otel.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == ["megatron.layer.forward"]


def shared_ids_run(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, lean: bool
) -> tuple[list[ReadableSpan], int]:
    """One pipeline stage (rank 0, next stage rank 2) of a run: roots in the interval's shared
    trace, a send with its derived span id, a receive linked to the next stage's send."""
    exporter = own_provider_exporting_to(otel, monkeypatch, lean)
    otel.configure()
    run = otel._state.PROCESS.run
    assert type(run.tracer).__name__ == ("LeanTracer" if lean else "Tracer")
    assert isinstance(run.ids, otel._ranks.ChosenIds)
    run.pipeline = otel._ranks.Pipeline(rank=0, next_rank=2, prev_rank=None)
    shared: list[int] = []
    otel.begin_training(0, 1)
    otel.train_iteration(0)
    for name in ("megatron.p2p.send_forward", "megatron.p2p.recv_backward"):
        span = otel.start_span(name)
        assert span is not None
        span.end()
    otel.end_training()

    def other_thread() -> None:  # a root of a statement site: joins the shared trace
        shared.append(run.trace_id)
        span = otel.start_span("megatron.checkpoint.save")
        assert span is not None
        span.end()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    otel.shutdown()
    return list(exporter.get_finished_spans()), shared[0]


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "sdk"])
def test_shared_trace_ids_derived_send_ids_and_receive_links_on_both_paths(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, lean: bool
) -> None:
    spans, shared = shared_ids_run(otel, monkeypatch, lean)
    ranks = otel._ranks
    run_id = bytes.fromhex(str(spans[0].resource.attributes["megatron.run_id"]))
    by_name = {s.name: s for s in spans}
    train = by_name["megatron.train"]
    assert train.context.trace_id == ranks.interval_trace_id(run_id, 0)
    send, receive = by_name["megatron.p2p.send_forward"], by_name["megatron.p2p.recv_backward"]
    assert send.context.span_id == ranks.p2p_span_id(run_id, 0, "forward", 0)
    assert send.attributes is not None and send.attributes["megatron.p2p.peer_rank"] == 2
    assert [link.context.span_id for link in receive.links] == [ranks.p2p_span_id(run_id, 2, "backward", 0)]
    assert receive.attributes is not None and receive.attributes["megatron.p2p.seq"] == 0
    assert send.context.trace_id == receive.context.trace_id == train.context.trace_id
    save = by_name["megatron.checkpoint.save"]
    assert save.parent is None and shared and save.context.trace_id == shared


def test_chosen_ids_draw_from_the_per_process_generator(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(otel._ids, "span_id", lambda: calls.append("span") or 5)
    monkeypatch.setattr(otel._ids, "trace_id", lambda: calls.append("trace") or 7)
    ids = otel._ranks.ChosenIds()
    assert (ids.generate_span_id(), ids.generate_trace_id()) == (5, 7)
    ids.choose(trace_id=11, span_id=13)
    assert (ids.generate_span_id(), ids.generate_trace_id()) == (13, 11)
    assert calls == ["span", "trace"]
