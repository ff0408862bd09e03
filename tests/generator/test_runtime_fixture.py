"""Generated code on a fixture module, run with the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import inspect

import pytest
from opentelemetry.trace import StatusCode


def test_enabled_group_emits_spans_with_attributes_and_parents(modules, exporter, provider) -> None:
    _, demo, otel = modules
    otel.enable("layer", tracer_provider=provider)
    layer = demo.Layer()
    assert layer.forward(3, scale=2) == 13
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"demo.layer.forward", "demo.layer.mlp"}
    forward, mlp = spans["demo.layer.forward"], spans["demo.layer.mlp"]
    assert forward.attributes["demo.layer_number"] == 7
    assert forward.attributes["megatron.span_group"] == "layer"
    assert mlp.parent is not None and mlp.parent.span_id == forward.context.span_id
    assert layer.attribute_reads == 1


def test_end_attributes_are_set_after_the_statements(modules, exporter, provider) -> None:
    _, demo, otel = modules
    otel.enable("step", tracer_provider=provider)
    assert demo.step([1, 2, 3]) == (6, True)
    (span,) = exporter.get_finished_spans()
    assert span.name == "demo.step" and span.attributes["demo.total"] == 6


def test_disabled_group_emits_nothing_and_evaluates_no_attribute(modules, exporter, provider) -> None:
    _, demo, otel = modules
    otel.enable("step", tracer_provider=provider)
    layer = demo.Layer()
    assert layer.forward(3, scale=2) == 13
    assert exporter.get_finished_spans() == ()
    assert layer.attribute_reads == 0


def test_never_enabled_runs_unchanged(modules) -> None:
    pristine, demo, otel = modules
    assert otel.enabled_groups() == frozenset()
    assert demo.Layer().forward(5) == pristine.Layer().forward(5)
    assert demo.step([4, -1]) == pristine.step([4, -1])


def test_exception_is_recorded_and_reraised(modules, exporter, provider) -> None:
    _, demo, otel = modules
    otel.enable("everything", tracer_provider=provider)
    with pytest.raises(ValueError, match="boom") as raised:
        demo.failing("boom")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]
    assert span.events[0].attributes["exception.message"] == "boom"
    assert isinstance(raised.value, ValueError)


def test_signatures_and_return_values_unchanged(modules, exporter, provider) -> None:
    pristine, demo, otel = modules
    otel.enable("everything", tracer_provider=provider)
    for name in ("failing", "step"):
        assert inspect.signature(getattr(demo, name)) == inspect.signature(getattr(pristine, name))
        assert getattr(demo, name).__doc__ == getattr(pristine, name).__doc__
    assert inspect.signature(demo.Layer.forward) == inspect.signature(pristine.Layer.forward)
    assert demo.Layer.forward.__doc__ == pristine.Layer.forward.__doc__
    for values in ([], [1], [-3, 1], [2, 2, 2]):
        assert demo.step(values) == pristine.step(values)
    assert demo.Layer().forward(-4, scale=3) == pristine.Layer().forward(-4, scale=3)


def test_flat_span_is_closed_by_its_enclosing_span_when_an_exception_leaves_it(
    modules, exporter, provider
) -> None:
    _, demo, otel = modules
    otel.enable("everything", tracer_provider=provider)
    assert demo.staged(False) == 3
    with pytest.raises(RuntimeError, match="stage failed"):
        demo.staged(True)
    demo.step([1])
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert names == ["demo.staged.stages", "demo.staged", "demo.staged.stages", "demo.staged", "demo.step"]
    ok_inner, ok_outer, failed_inner, failed_outer, after = spans
    assert ok_inner.parent.span_id == ok_outer.context.span_id
    assert failed_inner.parent.span_id == failed_outer.context.span_id
    for span in (failed_inner, failed_outer):
        assert span.status.status_code is StatusCode.ERROR
        assert span.events[0].attributes["exception.message"] == "stage failed"
    assert failed_inner.end_time <= failed_outer.end_time
    assert after.parent is None, "the context of the spans left by the exception was restored"
