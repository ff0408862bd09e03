"""Spans in coroutines, with real asyncio: kept per task, on the lean path and the SDK path.

Requests interleaved on one event loop never parent into each other (each task's spans are on
its own stack, the current span in its own context); a span across ``await`` ends exactly once,
on return, on an exception and on ``asyncio.CancelledError`` (marked ERROR); a span handed over
to a stream (``otel.stream``) ends once, when the stream is exhausted, raises, is closed or is
abandoned. The call sites are written as the generator writes them (try/finally).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import random
import sys
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from tests.support.lean_workload import enable_env, own_provider_exporting_to
from tests.support.processors import in_memory


@pytest.fixture(params=["lean", "sdk"])
def recording(
    request: pytest.FixtureRequest, otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """(the runtime, what it exported so far) on either recording path."""
    if request.param == "lean":
        exporter = own_provider_exporting_to(otel, monkeypatch, lean=True)
        otel.configure()
        assert type(otel._state.PROCESS.run.tracer).__name__ == "LeanTracer"
    else:
        provider, exporter = in_memory()
        enable_env(monkeypatch)
        otel.configure(tracer_provider=provider)
        assert type(otel._state.PROCESS.run.tracer).__name__ == "Tracer"

    def finished() -> list[ReadableSpan]:
        otel.shutdown()
        return [s for s in exporter.get_finished_spans() if s.name.startswith("megatron.")]

    yield otel, finished


def by_id(spans: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans}


async def request(otel: ModuleType, number: int, rng: random.Random) -> int:
    """One request as the generator instruments a handler: a span across awaits, a child span
    around the engine's gather, whose tasks open spans of their own."""
    _otel_span = otel.STEP and otel.start_span("megatron.train.iteration", lambda: {"req": number})
    try:
        await asyncio.sleep(rng.random() / 1000)
        _otel_span_2 = otel.LAYER and otel.start_span("megatron.layer.forward", lambda: {"req": number})
        try:
            results = await asyncio.gather(*(engine(otel, number, rng) for _ in range(2)))
        finally:
            _otel_span_2 and _otel_span_2.end()
        await asyncio.sleep(0)
        return sum(results)
    finally:
        _otel_span and _otel_span.end()


async def engine(otel: ModuleType, number: int, rng: random.Random) -> int:
    _otel_span = otel.LAYER and otel.start_span("megatron.layer.mlp", lambda: {"req": number})
    try:
        for _ in range(3):
            await asyncio.sleep(rng.random() / 1000)
        return number
    finally:
        _otel_span and _otel_span.end()


def test_interleaved_requests_never_parent_into_each_other(
    recording: Any, caplog: pytest.LogCaptureFixture
) -> None:
    otel, finished = recording
    rng = random.Random(7)

    async def serve() -> list[int]:
        return await asyncio.gather(*(request(otel, n, rng) for n in range(32)))

    assert asyncio.run(serve()) == [2 * n for n in range(32)]
    spans = finished()
    ids = by_id(spans)
    assert len(ids) == len(spans) == 32 * 4  # each span ended (and was exported) once
    names = {"megatron.train.iteration": None, "megatron.layer.forward": "megatron.train.iteration"}
    names["megatron.layer.mlp"] = "megatron.layer.forward"
    for span in spans:
        parent_name = names[span.name]
        if parent_name is None:
            assert span.parent is None, span.name
            continue
        parent = ids[span.parent.span_id]
        assert (parent.name, parent.attributes["req"]) == (parent_name, span.attributes["req"])
        assert parent.context.trace_id == span.context.trace_id
        # no span was ended early by another task's (a parent ends after its children)
        assert span.end_time <= parent.end_time and span.status.is_ok, span.name
    assert len({s.context.trace_id for s in spans}) == 32
    assert not otel._state.PROCESS.run.open_spans.stack
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # no context restored amiss


def test_a_span_across_awaits_ends_once_on_exception_and_cancellation(recording: Any) -> None:
    otel, finished = recording
    started = asyncio.Event()

    async def handler(fail: bool, hang: bool) -> str:
        _otel_span = otel.STEP and otel.start_span("megatron.train.iteration")
        try:
            await asyncio.sleep(0)
            if hang:
                started.set()
                await asyncio.sleep(3600)
            if fail:
                raise ValueError("bad request")
            return "ok"
        finally:
            _otel_span and _otel_span.end()
            _otel_span and _otel_span.end()  # a second end does nothing

    async def serve() -> list[str]:
        out = [await handler(False, False)]
        with pytest.raises(ValueError):
            await handler(True, False)
        task = asyncio.create_task(handler(False, True))
        await started.wait()
        task.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await task
        return out

    assert asyncio.run(serve()) == ["ok"]
    spans = finished()
    assert len(spans) == len(by_id(spans)) == 3
    statuses = sorted((s.status.status_code.name, s.status.description or "") for s in spans)
    assert statuses == [("ERROR", "CancelledError"), ("ERROR", "ValueError"), ("UNSET", "")]
    events = sorted(e.attributes["exception.type"] for s in spans for e in s.events)
    assert events == ["ValueError", "asyncio.exceptions.CancelledError"]


async def chunks(n: int, fail: bool = False, hang: asyncio.Event | None = None) -> AsyncIterator[str]:
    for i in range(n):
        await asyncio.sleep(0)
        if hang is not None and i == 1:
            hang.set()
            await asyncio.sleep(3600)
        if fail and i == 1:
            raise RuntimeError("engine failed")
        yield f"data: {i}\n\n"


async def producing(otel: ModuleType, n: int) -> AsyncIterator[str]:
    """A stream whose items are made under spans of their own (none open across a yield)."""
    for i in range(n):
        child = otel.LAYER and otel.start_span("megatron.layer.forward")
        await asyncio.sleep(0)
        child and child.end()
        yield f"data: {i}\n\n"


def handler(otel: ModuleType, stream: Any) -> Any:
    """A handler returning a streamed response (``Response(_otel.stream(_otel_span, ...))``)."""
    _otel_span = otel.STEP and otel.start_span("megatron.train.iteration")
    try:
        return {"body": otel.stream(_otel_span, stream)}
    finally:
        _otel_span and _otel_span.end()


def test_a_streamed_span_ends_with_its_stream(recording: Any) -> None:
    otel, finished = recording
    seen: list[str] = []

    async def serve() -> None:
        response = handler(otel, producing(otel, 3))
        assert not trace.get_current_span().get_span_context().is_valid  # handed over at return
        async for chunk in response["body"]:
            seen.append(chunk)
        failing = handler(otel, chunks(3, fail=True))
        with pytest.raises(RuntimeError):
            async for _ in failing["body"]:
                pass
        closed = handler(otel, chunks(3))
        assert await closed["body"].__anext__() == "data: 0\n\n"
        await closed["body"].aclose()
        await closed["body"].aclose()  # a second close ends nothing more
        hang = asyncio.Event()
        hanging = handler(otel, chunks(3, hang=hang))

        async def consume() -> None:
            async for _ in hanging["body"]:
                pass

        task = asyncio.create_task(consume())
        await hang.wait()
        task.cancel()  # the client disconnected mid-stream
        with pytest.raises(asyncio.CancelledError):
            await task
        abandoned = handler(otel, chunks(3))
        assert await abandoned["body"].__anext__() == "data: 0\n\n"
        del abandoned
        gc.collect()
        never = handler(otel, chunks(3))  # a response never sent
        del never
        gc.collect()

    asyncio.run(serve())
    assert seen == ["data: 0\n\n", "data: 1\n\n", "data: 2\n\n"]
    spans = finished()
    assert len(spans) == len(by_id(spans))
    streamed = [s for s in spans if s.name == "megatron.train.iteration"]
    outcomes = [(s.status.status_code.name, s.status.description or "") for s in streamed]
    assert outcomes == [
        ("UNSET", ""),
        ("ERROR", "RuntimeError"),
        ("ERROR", "stream closed before its end"),
        ("ERROR", "CancelledError"),
        ("ERROR", "stream abandoned"),
        ("ERROR", "stream abandoned"),
    ]
    ids = by_id(spans)
    children = [s for s in spans if s.name == "megatron.layer.forward"]
    assert len(children) == 3
    assert all(ids[c.parent.span_id] is streamed[0] for c in children)
    # while the stream produced an item its span was the current one; it lasted until the end
    assert streamed[0].end_time >= max(c.end_time for c in children)


def test_a_handler_failing_after_the_hand_over_ends_the_span_then(recording: Any) -> None:
    otel, finished = recording

    def broken() -> Any:
        _otel_span = otel.STEP and otel.start_span("megatron.train.iteration")
        try:
            body = otel.stream(_otel_span, iter(["a", "b"]))
            raise KeyError(body)
        finally:
            _otel_span and _otel_span.end()

    with pytest.raises(KeyError) as raised:
        broken()
    assert list(raised.value.args[0]) == ["a", "b"]  # iterated later: ends nothing more
    spans = finished()
    assert [(s.status.status_code.name, s.status.description) for s in spans] == [("ERROR", "KeyError")]


def test_a_sync_stream_and_a_group_off(recording: Any) -> None:
    otel, finished = recording
    body = handler(otel, iter(["x", "y"]))["body"]
    assert otel._state.PROCESS.run.open_spans.stack == []  # handed over: off the stack at return
    assert list(body) == ["x", "y"]
    items = ["z"]
    assert otel.stream(False, items) is items  # the group off: the iterable itself
    assert otel.stream(None, items) is items  # not started
    spans = finished()
    assert [(s.name, s.status.status_code.name) for s in spans] == [("megatron.train.iteration", "UNSET")]


def test_a_loop_run_inside_a_span_keeps_its_tasks_apart(recording: Any) -> None:
    """asyncio.run() inside an open span (a rollout inside a training step): the tasks' spans
    are its children, each task's on its own stack."""
    otel, finished = recording
    rng = random.Random(3)

    async def serve() -> list[int]:
        return await asyncio.gather(*(request(otel, n, rng) for n in range(8)))

    _otel_span = otel.STEP and otel.start_span("megatron.checkpoint.save")
    try:
        assert asyncio.run(serve()) == [2 * n for n in range(8)]
    finally:
        _otel_span and _otel_span.end()
    spans = finished()
    ids = by_id(spans)
    (outer,) = [s for s in spans if s.name == "megatron.checkpoint.save"]
    for span in spans:
        if span.name == "megatron.train.iteration":
            assert ids[span.parent.span_id] is outer
        elif span.name != "megatron.checkpoint.save":
            parent = ids[span.parent.span_id]
            assert parent.attributes["req"] == span.attributes["req"]
    assert len(spans) == len(ids) == 1 + 8 * 4


def test_a_traced_coroutine_and_its_stream(recording: Any) -> None:
    """The decorator form on ``async def``: a coroutine function whose span covers the awaited
    run (not the call that makes the coroutine), cancellation included; ``stream(iterable)`` in
    its body hands that span over."""
    otel, finished = recording

    @otel.traced("megatron.train.iteration", {"req": "number"})
    async def handle(number: int, streamed: bool = False) -> Any:
        await asyncio.sleep(0)
        if number < 0:
            await asyncio.sleep(3600)
        if streamed:
            return {"body": otel.stream(producing(otel, 2))}
        return number

    assert asyncio.iscoroutinefunction(handle) and handle.__name__ == "handle"

    async def serve() -> list[Any]:
        out = list(await asyncio.gather(*(handle(n) for n in range(8))))
        response = await handle(100, streamed=True)
        out.append([chunk async for chunk in response["body"]])
        task = asyncio.create_task(handle(-1))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return out

    assert asyncio.run(serve()) == [*range(8), ["data: 0\n\n", "data: 1\n\n"]]
    spans = finished()
    ids = by_id(spans)
    assert len(spans) == len(ids) == 8 + 1 + 2 + 1
    handled = {s.attributes["req"]: s for s in spans if s.name == "megatron.train.iteration"}
    assert sorted(handled) == [-1, *range(8), 100]
    assert handled[-1].status.description == "CancelledError"
    children = [s for s in spans if s.name == "megatron.layer.forward"]
    assert all(ids[c.parent.span_id] is handled[100] for c in children)
    assert handled[100].end_time >= max(c.end_time for c in children)  # ended with its stream


def test_sigterm_ends_the_spans_of_suspended_tasks_once(recording: Any) -> None:
    """The open spans of tasks suspended at an ``await`` (their stacks are per task, not per
    thread) are ended by the SIGTERM path with its ERROR status; the tasks' own ends, when they
    run after it, end nothing more."""
    otel, finished = recording
    rng = random.Random(5)

    async def serve() -> None:
        tasks = [asyncio.create_task(request(otel, n, rng)) for n in range(4)]
        await asyncio.sleep(0)  # each task is inside its spans, suspended
        otel._spans.abort_open_spans("terminated by SIGTERM")
        await asyncio.gather(*tasks)

    asyncio.run(serve())
    spans = finished()
    assert len(spans) == len(by_id(spans))
    aborted = [s for s in spans if s.status.description == "terminated by SIGTERM"]
    assert {s.name for s in aborted} >= {"megatron.train.iteration"}
    assert len([s for s in spans if s.name == "megatron.train.iteration"]) == 4


def test_a_traced_coroutine_off_is_the_coroutine_itself(otel: ModuleType) -> None:
    """Its group off, a traced coroutine function's call returns the function's own coroutine (no
    frame of the wrapper's: the disabled async span's cost, benchmarks/README.md); frameworks
    that ask whether it is a coroutine function (Quart: asyncio's on 3.11, inspect's on 3.14)
    are told so, and a second traced on it wraps it as a coroutine function too."""

    async def handle(number: int) -> int:
        return number

    traced = otel.traced("megatron.train.iteration")(handle)
    coroutine = traced(3)
    assert inspect.iscoroutine(coroutine) and coroutine.cr_code is handle.__code__
    assert asyncio.run(coroutine) == 3
    assert asyncio.iscoroutinefunction(traced)
    if sys.version_info >= (3, 12):
        assert inspect.iscoroutinefunction(traced)
    twice = otel.traced("megatron.train.iteration")(traced)
    assert asyncio.iscoroutinefunction(twice) and asyncio.run(twice(4)) == 4
