"""One workload for the runtime's recording paths (lean and SDK) and the fields a backend gets of
what it recorded (tests/runtime_pkg/test_lean_path.py, test_lean_context.py, test_lean_borrowed.py,
tests/megatron_cpu/test_otlp_encoding.py)."""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def set_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """Each ``NAME=value`` set in the environment for the test."""
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def enable_env(monkeypatch: pytest.MonkeyPatch, groups: str = "all", **extra: str) -> None:
    """Telemetry on through the environment: ``groups`` recorded, metrics off, ``extra`` set too
    (over those)."""
    on = {
        "MEGATRON_OTEL_ENABLED": "1",
        "MEGATRON_OTEL_SPAN_GROUPS": groups,
        "MEGATRON_OTEL_METRICS_ENABLED": "0",
    }
    set_env(monkeypatch, **{**on, **extra})  # ``extra`` may override


def own_provider_exporting_to(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, lean: bool
) -> InMemorySpanExporter:
    """configure() builds the runtime's own provider; its span exporter is ``exporter``."""
    exporter = InMemorySpanExporter()

    def otlp_exporter(settings: Any, signal: str, kind: str) -> Any:
        return exporter if signal == "trace" else None

    monkeypatch.setattr(otel._export, "otlp_exporter", otlp_exporter)
    monkeypatch.setattr(otel._lean_install, "ALLOWED", lean)
    for name, value in {
        "MEGATRON_OTEL_ENABLED": "1",
        "MEGATRON_OTEL_EXPORTER": "otlp",
        "MEGATRON_OTEL_SPAN_GROUPS": "all",
        "MEGATRON_OTEL_METRICS_ENABLED": "0",
        "OTEL_SERVICE_NAME": "lean-test",
    }.items():
        monkeypatch.setenv(name, value)
    return exporter


def workload(otel: ModuleType, foreign: trace.Tracer, muted: trace.Tracer) -> None:
    otel.startup({"program_start": 1_000.0, "main_entry": 1_001.0})
    otel.begin_training(0, 2)
    for iteration in range(3):
        otel.train_iteration(iteration)
        step = otel.STEP and otel.start_span(
            "megatron.train.iteration", lambda: {"megatron.iteration": iteration}
        )
        layer = otel.LAYER and otel.start_span("megatron.layer.forward")
        with foreign.start_as_current_span("foreign.op", attributes={"library": "x"}):
            mlp = otel.LAYER and otel.start_span(
                "megatron.layer.mlp", lambda: {"sizes": [1, 2], "invalid": object()}
            )
            otel.set_current_attributes(lambda: {"megatron.current": "set"})
            otel.stamp("megatron.stamped", (3, 4))
            mlp and mlp.end()
        with muted.start_as_current_span("muted.op"):  # sampled out: its children too
            inner = otel.LAYER and otel.start_span("megatron.layer.mlp")
            inner and inner.end()
        layer and layer.end()
        try:
            failing = otel.CHECKPOINT and otel.start_span("megatron.checkpoint.save")
            try:
                raise ValueError(f"boom {iteration}")
            finally:
                failing and failing.end()
        except ValueError:
            pass
        step and step.end()

    def other_thread() -> None:
        span = otel.CHECKPOINT and otel.start_span("megatron.checkpoint.save")
        span and span.end()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    otel.end_training()


def normalized(spans: list[ReadableSpan]) -> list[dict[str, Any]]:
    """Every field a backend receives, with ids replaced by the position of the span they name."""
    index = {s.context.span_id: i for i, s in enumerate(spans)}
    trace_index: dict[int, int] = {}
    for s in spans:
        trace_index.setdefault(s.context.trace_id, len(trace_index))
    out = []
    for s in spans:
        out.append(
            {
                "name": s.name,
                "trace": trace_index[s.context.trace_id],
                "parent": None if s.parent is None else index.get(s.parent.span_id, "outside"),
                "parent_remote": None if s.parent is None else s.parent.is_remote,
                "trace_state": str(s.context.trace_state),
                "attributes": dict(s.attributes or {}),
                "dropped_attributes": s.dropped_attributes,
                "events": [(e.name, {k: v for k, v in (e.attributes or {}).items()}) for e in s.events],
                "links": [(index.get(link.context.span_id), dict(link.attributes or {})) for link in s.links],
                "status": (s.status.status_code, s.status.description),
                "kind": s.kind,
                # the run id is random per run (megatron.run_id: the ranks of one run share it)
                "resource": {k: v for k, v in s.resource.attributes.items() if k != "megatron.run_id"},
                "scope": (s.instrumentation_scope.name, s.instrumentation_scope.version)
                if s.instrumentation_scope
                else None,
                "timed": s.start_time is not None and s.end_time is not None and s.end_time >= s.start_time,
            }
        )
    return out
