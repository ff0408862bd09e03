"""Ended lean spans started again (``_lean_span.recycle``): after export, a span nothing else
references is kept for the training thread's next ``start_span``, which then allocates nothing.
A span still referenced (by the program, a child, a context) is never reused, and a reused span
shows nothing of its past life: not its context, attributes, parent or the exception its caller
was handling."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from tests.support.lean_workload import own_provider_exporting_to


def test_only_spans_nothing_else_references_are_kept(otel: ModuleType) -> None:
    lean = importlib.import_module(f"{otel.__name__}._lean_span")
    lean._FREE.clear()
    parent = lean.new_span(None, "p", None, (1, 1, None), {"a": 1}, 0)
    children = [lean.new_span(None, f"c{i}", parent, (1, 1, None), None, 0) for i in range(2)]
    held = children[1]  # the program keeps this one
    batch = [*children, parent, "an SDK span"]
    kept_ids = {id(children[0]), id(parent)}
    del parent, children
    lean.recycle(batch)
    assert {id(s) for s in lean._FREE} == kept_ids  # the parent too, once its children released it
    assert held._name == "c1" and held._trace == (1, 1, None)  # untouched but for its parent
    lean._FREE.clear()


def test_a_span_started_again_shows_nothing_of_its_past(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace

    lean = importlib.import_module(f"{otel.__name__}._lean_span")
    own_provider_exporting_to(otel, monkeypatch, lean=True)
    otel.configure()
    (recorder,) = otel._state.PROCESS.run.processors
    lean._FREE.clear()
    outer = otel.start_span("megatron.train.iteration")
    try:
        raise ValueError("handled before the span began")
    except ValueError:
        inner = otel.start_span("megatron.layer.forward", lambda: {"megatron.layer_number": 3})
        old_context = trace.get_current_span().get_span_context()
        inner.end()  # not an error: the exception was being handled when it began
    old = id(inner)
    del inner
    batch = recorder._take()
    assert [s._name for s in batch] == ["megatron.layer.forward"]
    assert not batch[0]._events and batch[0]._status is None
    lean.recycle(batch)
    assert [id(s) for s in lean._FREE] == [old]

    again = otel.start_span("megatron.layer.mlp")
    assert id(again) == old and not lean._FREE  # the same object, started again
    assert again._parent is outer and again._extra is None and again._handled is None
    context = trace.get_current_span().get_span_context()
    assert context.is_valid and context.span_id != old_context.span_id
    assert context.trace_id == old_context.trace_id  # its parent's trace
    with pytest.raises(KeyError):
        try:
            raise KeyError("escapes the span")
        finally:
            again.end()
    (event,) = again._events  # an escaping exception is recorded: nothing handled at its start
    assert event[0] == "exception" and again._status.status_code is trace.StatusCode.ERROR
    outer.end()
    assert otel._state.PROCESS.run.open_spans.stack == []


def test_spans_open_inline_again_only_once_no_span_of_the_nesting_is_handed_over(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A span handed over to a stream stays open off the stack: spans opened meanwhile take the
    nesting's general path (a handed span is not a plain LeanSpan until its stream ends it)."""
    own_provider_exporting_to(otel, monkeypatch, lean=True)
    otel.configure()
    outer = otel.start_span("megatron.train.iteration")
    middle = otel.start_span("megatron.train.iteration.forward_backward")
    inner = otel.start_span("megatron.layer.forward")
    nesting = inner._state
    inner_body = otel.stream(inner, iter(["b"]))
    assert nesting.owner is None  # while it is handed over
    inner.end()  # leaves: its parent, middle, is a plain span: inline again
    assert nesting.owner is otel._state.PROCESS.run.tracer
    outer_body = otel.stream(outer, iter(["a"]))
    middle_body = otel.stream(middle, iter(["c"]))
    middle.end()  # leaves: its parent, outer, is still handed over
    assert nesting.owner is None
    late = otel.start_span("megatron.layer.mlp")
    assert late._state is not nesting  # a nesting of its own, its parent outer (by its context)
    assert late._parent.span_id == outer.get_span_context().span_id
    late.end()
    outer.end()
    assert [list(b) for b in (inner_body, middle_body, outer_body)] == [["b"], ["c"], ["a"]]
    assert otel._state.PROCESS.run.open_spans.stack == []


def test_fits_table_is_bounded_by_its_cap_not_the_queue_size() -> None:
    # a queue size of a million once built a list of a million on the first span (8 MB, 85 ms)
    from codegen.otel_runtime._lean_span import fits

    assert len(fits(1_000_000, 1_000_000)) == 4097
    assert fits(8, 4) == [True, True, True, False, True, True, True, True, False]
