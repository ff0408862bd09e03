"""`codegen verify` on spans captured from generated code, in both capture formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from codegen.cli import main
from tests.generator.support import FIXTURES, make_project
from tests.support.otlp_json import attributes


def otlp_json(spans: tuple[ReadableSpan, ...]) -> str:
    """The OTLP JSON file format, as the collector's file exporter writes it (one request)."""

    raw = [
        {
            "traceId": f"{s.context.trace_id:032x}",
            "spanId": f"{s.context.span_id:016x}",
            "parentSpanId": f"{s.parent.span_id:016x}" if s.parent else "",
            "name": s.name,
            "attributes": attributes(s.attributes),
        }
        for s in spans
    ]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": raw}]}]}) + "\n"


def console(spans: tuple[ReadableSpan, ...]) -> str:
    return "".join(s.to_json() + "\n" for s in spans)


@pytest.fixture
def capture(modules, exporter: InMemorySpanExporter, provider: TracerProvider) -> tuple[ReadableSpan, ...]:
    _, demo, otel = modules
    otel.enable("everything", tracer_provider=provider)
    demo.Layer().forward(2)
    demo.step([1, 2])
    with pytest.raises(ValueError):
        demo.failing("x")
    return exporter.get_finished_spans()


def _specs(tmp_path: Path, edit=lambda text: text) -> Path:
    text = edit((FIXTURES / "runtime_specs.yaml").read_text(encoding="utf-8"))
    specs, _ = make_project(
        tmp_path / "verify", text, (FIXTURES / "runtime_src/megatron/demo.py").read_text()
    )
    return specs


def _verify(tmp_path: Path, specs: Path, text: str, *extra: str) -> int:
    path = tmp_path / "capture.json"
    path.write_text(text)
    return main(["verify", str(specs), str(path), "--source", str(specs.parent / "src"), *extra])


@pytest.mark.parametrize("fmt", [otlp_json, console], ids=["otlp-json", "console"])
def test_clean_capture_passes(fmt, capture, tmp_path: Path, capsys) -> None:
    assert _verify(tmp_path, _specs(tmp_path), fmt(capture)) == 0
    assert "4 spans, 4 distinct names checked: 0 findings" in capsys.readouterr().out


def test_span_moved_to_another_group_fails(capture, tmp_path: Path, capsys) -> None:
    specs = _specs(
        tmp_path,
        lambda t: t.replace("name: demo.failing\n    group: step", "name: demo.failing\n    group: io"),
    )
    assert _verify(tmp_path, specs, otlp_json(capture)) == 1
    assert "span 'demo.failing' has group 'step'; the docs say 'io'" in capsys.readouterr().out


def test_renamed_span_fails(capture, tmp_path: Path, capsys) -> None:
    specs = _specs(tmp_path, lambda t: t.replace("name: demo.layer.mlp", "name: demo.layer.feed_forward"))
    assert _verify(tmp_path, specs, otlp_json(capture)) == 1
    out = capsys.readouterr().out
    assert "span 'demo.layer.mlp' is not in the taxonomy" in out
    assert "span 'demo.layer.feed_forward' (group layer) is documented but was never seen" in out


def test_wrong_parent_and_missing_attribute_fail(capture, tmp_path: Path, capsys) -> None:
    text = otlp_json(capture)
    document = json.loads(text)
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    forward = next(s for s in spans if s["name"] == "demo.layer.forward")
    step = next(s for s in spans if s["name"] == "demo.step")
    step["parentSpanId"] = forward["spanId"]
    forward["attributes"] = [a for a in forward["attributes"] if a["key"] != "demo.layer_number"]
    assert _verify(tmp_path, _specs(tmp_path), json.dumps(document)) == 1
    out = capsys.readouterr().out
    assert "span 'demo.step' runs inside 'demo.layer.forward'; the docs allow: none (a root)" in out
    assert "span 'demo.layer.forward' lacks attribute(s) demo.layer_number" in out


def test_documented_but_unseen_within_checked_groups(capture, tmp_path: Path, capsys) -> None:
    only_layer = tuple(s for s in capture if s.name.startswith("demo.layer"))
    assert _verify(tmp_path, _specs(tmp_path), otlp_json(only_layer)) == 0
    assert _verify(tmp_path, _specs(tmp_path), otlp_json(only_layer), "--groups", "layer,step") == 1
    assert "span 'demo.step' (group step) is documented but was never seen" in capsys.readouterr().out


def test_empty_capture_never_passes(tmp_path: Path, capsys) -> None:
    assert _verify(tmp_path, _specs(tmp_path), "") == 1
    assert "0 spans, 0 distinct names checked: 1 finding" in capsys.readouterr().out


def test_unreadable_capture_is_exit_3(tmp_path: Path, capsys) -> None:
    assert _verify(tmp_path, _specs(tmp_path), "{not json") == 3
    assert "capture.json:1:2: error: not JSON" in capsys.readouterr().err


def test_attribute_value_of_the_wrong_type_fails(capture, tmp_path: Path, capsys) -> None:
    """Captured values are checked against the registry types declared under ``attributes:``."""

    def declare(kind: str):
        return lambda t: t + f"attributes:\n  demo.layer_number: {{type: {kind}, brief: The layer.}}\n"

    text = otlp_json(capture)
    assert _verify(tmp_path, _specs(tmp_path / "int", declare("int")), text) == 0
    capsys.readouterr()
    assert _verify(tmp_path, _specs(tmp_path / "str", declare("string")), text) == 1
    out = capsys.readouterr().out
    assert "span 'demo.layer.forward' attribute 'demo.layer_number' is 7; the registry says string" in out
    # the console exporter's output carries the types as well
    assert _verify(tmp_path, _specs(tmp_path / "str2", declare("string")), console(capture)) == 1


def _metrics_document(*metrics: tuple[str, str, str]) -> str:
    """An OTLP JSON ``resourceMetrics`` request with one data point per (name, unit, kind)."""
    raw = []
    for name, unit, kind in metrics:
        point = {"timeUnixNano": "1", "asDouble": 1.5}
        data = {"dataPoints": [point]}
        if kind == "sum":
            data.update(aggregationTemporality=2, isMonotonic=True)
        raw.append({"name": name, "unit": unit, kind: data})
    return json.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": raw}]}]}) + "\n"


def test_declared_metrics_with_their_units_pass(capture, tmp_path: Path, capsys) -> None:
    text = otlp_json(capture) + _metrics_document(
        ("demo.loss", "1", "gauge"), ("demo.learning_rate", "1", "gauge")
    )
    assert _verify(tmp_path, _specs(tmp_path), text) == 0
    assert "4 spans, 4 distinct names, 2 metric names checked: 0 findings" in capsys.readouterr().out


def test_undeclared_metric_wrong_unit_or_kind_fails(capture, tmp_path: Path, capsys) -> None:
    metrics = _metrics_document(
        ("demo.loss", "1", "sum"), ("demo.learning_rate", "ms", "gauge"), ("demo.tokens", "1", "gauge")
    )
    assert _verify(tmp_path, _specs(tmp_path), otlp_json(capture) + metrics) == 1
    out = capsys.readouterr().out
    assert "metric 'demo.loss' is exported as a sum; the docs declare a gauge" in out
    assert "metric 'demo.learning_rate' has unit 'ms'; the docs say '1'" in out
    assert "metric 'demo.tokens' is not declared" in out


def test_metrics_alone_are_not_a_clean_capture(tmp_path: Path, capsys) -> None:
    assert _verify(tmp_path, _specs(tmp_path), _metrics_document(("demo.loss", "1", "gauge"))) == 1
    assert "the capture holds no spans" in capsys.readouterr().out


def test_parent_may_be_the_nearest_documented_ancestor_whose_group_records(tmp_path: Path, capsys) -> None:
    """demo.staged (io) documented under demo.failing (layer, here), itself under demo.step (step):
    with the layer group not recording, demo.staged runs inside demo.step."""

    def edit(text: str) -> str:
        text = text.replace(
            "name: demo.failing\n    group: step",
            "name: demo.failing\n    group: layer\n    parents: [demo.step]",
        )
        return text.replace(
            "name: demo.staged\n    group: io",
            "name: demo.staged\n    group: io\n    parents: [demo.failing]",
        )

    def span(name: str, span_id: str, parent: str, group: str) -> dict[str, object]:
        attributes = [{"key": "megatron.span_group", "value": {"stringValue": group}}]
        if name == "demo.layer.forward":
            attributes.append({"key": "demo.layer_number", "value": {"intValue": "7"}})
        return {
            "traceId": "5" * 32,
            "spanId": span_id.rjust(16, "0"),
            "parentSpanId": parent.rjust(16, "0") if parent else "",
            "name": name,
            "attributes": attributes,
        }

    spans = [span("demo.step", "01", "", "step"), span("demo.staged", "02", "01", "io")]
    document = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    specs = _specs(tmp_path, edit)
    assert _verify(tmp_path, specs, json.dumps(document), "--groups", "") == 0, capsys.readouterr().out
    capsys.readouterr()
    spans.append(span("demo.layer.forward", "03", "", "layer"))  # now the layer group records
    assert _verify(tmp_path, specs, json.dumps(document), "--groups", "") == 1
    assert (
        "span 'demo.staged' runs inside 'demo.step'; the docs allow: demo.failing" in capsys.readouterr().out
    )
