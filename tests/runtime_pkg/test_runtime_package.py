"""The rendered telemetry runtime: generated constants, group resolution, and call-site behaviour."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from runtime_pkg_support import Rendered, make_project, render_into

from codegen.diagnostics import SpecError
from codegen.emit.runtime import HEADER, TAXONOMY, render_runtime, runtime_sources
from codegen.spec.load import load_project
from codegen.spec.model import Project
from tests.support.modules import with_pythonpath


def finished(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    spans = exporter.get_finished_spans()
    by_name = {s.name: s for s in spans}
    assert len(by_name) == len(spans), [s.name for s in spans]
    return by_name


# --- rendering ---------------------------------------------------------------------------------


def test_render_returns_package_init_with_header(rendered: Rendered) -> None:
    init = f"{rendered.project.runtime.package}/__init__.py"
    assert init in rendered.files
    for text in rendered.files.values():
        assert text.startswith(HEADER)
        assert "megatron-otel-codegen" in text.splitlines()[0]
        assert "Do not edit by hand" in text.splitlines()[0]


def test_render_is_deterministic() -> None:
    assert render_runtime(make_project("megatron/core/otel")) == render_runtime(
        make_project("megatron/core/otel")
    )


def test_rendered_runtime_compiles(rendered: Rendered) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "py_compile", *(str(rendered.root / p) for p in rendered.files)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("telemetry", [True, False])
@pytest.mark.parametrize("group_count", [0, 1, 4])
def test_rendered_runtime_is_black_formatted(group_count: int, telemetry: bool) -> None:
    black = pytest.importorskip("black")
    project = make_project("megatron/core/otel", telemetry=telemetry)
    groups = project.groups[:group_count]
    names = {g.name for g in groups}
    project = Project(
        runtime=project.runtime,
        upstream=project.upstream,
        groups=groups,
        presets=project.presets if groups else (),
        spans=tuple(s for s in project.spans if s.group in names),
        lifecycle=tuple(s for s in project.lifecycle if s.group in names),
        metrics=project.metrics,
        env=project.env,
        flags=project.flags,
    )
    files = render_runtime(project)
    assert set(files) == {f"megatron/core/otel/{name}" for name in (*runtime_sources(), TAXONOMY)}
    mode = black.Mode(line_length=100, string_normalization=False)
    taxonomy = files[f"megatron/core/otel/{TAXONOMY}"]
    assert black.format_str(taxonomy, mode=mode) == taxonomy


@pytest.mark.parametrize(
    ("bad", "message"),
    [("spans", "is reserved: the runtime already uses SPANS"), ("per-step", "lower_snake_case")],
)
def test_group_that_cannot_be_a_flag_is_rejected(bad: str, message: str, tmp_path: Path) -> None:
    """Checked in spec/ with the spec location, before anything is rendered."""
    fixture = (Path(__file__).resolve().parents[1] / "fixtures" / "telemetry.yaml").read_text()
    (tmp_path / "telemetry.yaml").write_text(fixture.replace("  io: I/O.", f"  {bad}: Bad."))
    with pytest.raises(SpecError) as raised:
        load_project(tmp_path)
    assert f"telemetry.yaml:14:3: error: group name '{bad}' " in raised.value.diagnostics.render()
    assert message in raised.value.diagnostics.render()


# --- generated constants -----------------------------------------------------------------------


def test_flags_and_constants_generated_from_project(otel: ModuleType) -> None:
    assert otel.GROUPS == ("job", "checkpoint", "step", "layer")
    for flag in ("JOB", "CHECKPOINT", "STEP", "LAYER"):
        assert getattr(otel, flag) is False
    assert otel.PRESETS == {
        "default": frozenset({"job", "checkpoint"}),
        "per_step": frozenset({"job", "checkpoint", "step"}),
        "profiling": frozenset({"job", "checkpoint", "step", "layer"}),
        "all": frozenset({"job", "checkpoint", "step", "layer"}),
    }
    assert otel.SPANS == {
        "megatron.layer.forward": ("layer", False),
        "megatron.layer.mlp": ("layer", False),
        "megatron.checkpoint.save": ("checkpoint", True),
        "megatron.train.iteration": ("step", True),
        # lifecycle spans share the table
        "megatron.startup": ("job", True),
        "megatron.startup.launch_script": ("job", True),
        "megatron.startup.container_load": ("job", True),
        "megatron.startup.imports": ("job", True),
        "megatron.startup.arg_parse": ("job", True),
        "pre_startup": ("job", True),
        "megatron.train": ("job", True),
    }
    assert otel.enabled_groups() == frozenset()
    assert otel.METRICS is False


def test_duplicate_span_name_rendered_once(rendered: Rendered) -> None:
    text = rendered.files[f"{rendered.project.runtime.package}/_taxonomy.py"]
    assert text.count('"megatron.layer.forward": Span("layer", False),') == 1


# --- resolve -----------------------------------------------------------------------------------


def test_resolve_expands_nested_presets(otel: ModuleType) -> None:
    assert otel.resolve("default") == {"job", "checkpoint"}
    assert otel.resolve("profiling") == {"job", "checkpoint", "step", "layer"}
    assert otel.resolve("per_step,layer") == otel.resolve("profiling")


def test_resolve_is_case_and_whitespace_insensitive(otel: ModuleType) -> None:
    assert otel.resolve("  Default ,LAYER,  ") == {"job", "checkpoint", "layer"}
    assert otel.resolve("PER_STEP") == {"job", "checkpoint", "step"}


def test_resolve_star_all_and_empty(otel: ModuleType) -> None:
    assert otel.resolve("*") == set(otel.GROUPS)
    assert otel.resolve("all") == set(otel.GROUPS)
    assert otel.resolve("") == frozenset()
    assert otel.resolve(" , ") == frozenset()


def test_resolve_unknown_name_lists_valid_names(otel: ModuleType) -> None:
    with pytest.raises(ValueError) as info:
        otel.resolve("default, full")
    message = str(info.value)
    assert "'full'" in message
    for name in ("default", "per_step", "profiling", "all", "job", "checkpoint", "step", "layer"):
        assert name in message


# --- enable / disable --------------------------------------------------------------------------


def test_enable_and_disable_flip_flags(otel: ModuleType, provider: TracerProvider) -> None:
    assert otel.enable("per_step", tracer_provider=provider) == {"job", "checkpoint", "step"}
    assert (otel.JOB, otel.CHECKPOINT, otel.STEP, otel.LAYER) == (True, True, True, False)
    assert otel.enabled_groups() == {"job", "checkpoint", "step"}
    assert otel.enable("layer", tracer_provider=provider) == {"layer"}
    assert (otel.JOB, otel.CHECKPOINT, otel.STEP, otel.LAYER) == (False, False, False, True)
    otel.disable()
    assert (otel.JOB, otel.CHECKPOINT, otel.STEP, otel.LAYER) == (False, False, False, False)
    assert otel.enabled_groups() == frozenset()


def test_enable_accepts_iterable_and_defaults_to_default_preset(
    otel: ModuleType, provider: TracerProvider
) -> None:
    assert otel.enable(["Layer", "step"], tracer_provider=provider) == {"layer", "step"}
    assert otel.enable(tracer_provider=provider) == {"job", "checkpoint"}
    with pytest.raises(ValueError, match="nope"):
        otel.enable("nope", tracer_provider=provider)


def test_enable_default_without_default_preset_is_all_groups(
    importable: Path, unique_top: str, provider: TracerProvider
) -> None:
    project = make_project(f"{unique_top}/otel", default_preset=False)
    otel = render_into(importable, project).import_runtime()
    assert otel.enable(tracer_provider=provider) == set(otel.GROUPS)


def test_start_span_before_enable_returns_none(otel: ModuleType) -> None:
    assert otel.start_span("megatron.layer.forward") is None


# --- call sites --------------------------------------------------------------------------------


def _attributes_evaluated_by_save(sites: ModuleType) -> list[str]:
    """The checkpoint call site run: what its attribute callback recorded (nothing when it did not
    run)."""
    calls: list[str] = []
    assert sites.save(calls) == "saved"
    return calls


def test_call_site_emits_span_with_attributes(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    otel.enable("checkpoint", tracer_provider=provider)
    assert _attributes_evaluated_by_save(sites) == ["attributes"]
    span = finished(exporter)["megatron.checkpoint.save"]
    assert dict(span.attributes or {}) == {
        "megatron.span_group": "checkpoint",
        "is_goodput_span": True,
        "megatron.iteration": 3,
    }
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is None
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_nested_call_sites_are_parent_and_child(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    otel.enable("layer", tracer_provider=provider)
    assert sites.Layer().forward(1) == 2
    spans = finished(exporter)
    outer, inner = spans["megatron.layer.forward"], spans["megatron.layer.mlp"]
    assert outer.context is not None and inner.parent is not None
    assert inner.parent.span_id == outer.context.span_id
    assert inner.context is not None and inner.context.trace_id == outer.context.trace_id
    assert dict(outer.attributes or {}) == {
        "megatron.span_group": "layer",
        "megatron.layer_number": 7,
        "megatron.skipped": False,
    }
    assert dict(inner.attributes or {}) == {"megatron.span_group": "layer"}
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_disabled_group_emits_nothing_and_skips_attributes(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    otel.enable("layer", tracer_provider=provider)
    assert _attributes_evaluated_by_save(sites) == []
    assert exporter.get_finished_spans() == ()
    otel.disable()
    assert sites.Layer().forward(1) == 2
    assert exporter.get_finished_spans() == ()


def test_exception_recorded_and_reraised(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    otel.enable("layer", tracer_provider=provider)
    with pytest.raises(KeyError) as info:
        sites.Layer().forward("boom")
    assert info.value.args == ("boom",)
    assert info.value.__context__ is None
    spans = finished(exporter)
    for name in ("megatron.layer.mlp", "megatron.layer.forward"):
        span = spans[name]
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "KeyError"
        assert [e.name for e in span.events] == ["exception"]
        assert (span.events[0].attributes or {})["exception.type"] == "KeyError"
    assert "megatron.skipped" not in (spans["megatron.layer.forward"].attributes or {})
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_call_site_inside_callers_except_block_is_not_error(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    otel.enable("checkpoint", tracer_provider=provider)
    assert sites.save_while_handling(fail=False) == "saved"
    span = finished(exporter)["megatron.checkpoint.save"]
    assert span.status.status_code is StatusCode.UNSET
    assert span.events == ()


def test_new_exception_inside_callers_except_block_is_error(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    otel.enable("layer", tracer_provider=provider)
    with pytest.raises(KeyError):
        sites.save_while_handling(fail=True)
    span = finished(exporter)["megatron.layer.forward"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "KeyError"


def test_failing_attributes_do_not_break_caller(
    otel: ModuleType,
    sites: ModuleType,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    otel.enable("checkpoint", tracer_provider=provider)
    with caplog.at_level(logging.WARNING, logger=otel.__name__):
        assert sites.save_broken_attributes() == "saved"
        assert sites.save_broken_attributes() == "saved"
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["megatron.checkpoint.save"] * 2
    for span in spans:
        assert dict(span.attributes or {}) == {
            "megatron.span_group": "checkpoint",
            "is_goodput_span": True,
        }
        assert span.status.status_code is StatusCode.UNSET
    warnings = [r for r in caplog.records if r.name == otel.__name__]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert "megatron.checkpoint.save" in warnings[0].getMessage()


def test_end_twice_is_harmless(
    otel: ModuleType,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    otel.enable("all", tracer_provider=provider)
    span = otel.start_span("megatron.train.iteration", lambda: {"megatron.iteration": 5})
    assert span is not None
    assert trace.get_current_span().is_recording()
    span.end()
    with caplog.at_level(logging.DEBUG):
        span.end()
        span.set_attributes(lambda: {"late": True})
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    (emitted,) = exporter.get_finished_spans()
    assert dict(emitted.attributes or {}) == {
        "megatron.span_group": "step",
        "is_goodput_span": True,
        "megatron.iteration": 5,
    }
    assert trace.get_current_span() is trace.INVALID_SPAN


# --- without opentelemetry ---------------------------------------------------------------------


def test_without_opentelemetry_runtime_is_inert(rendered: Rendered) -> None:
    runtime = rendered.project.runtime.module
    sites = f"{rendered.parent_module}.sites"
    script = textwrap.dedent(f"""\
        import importlib
        import sys

        sys.modules["opentelemetry"] = None
        otel = importlib.import_module({runtime!r})
        sites = importlib.import_module({sites!r})
        assert otel.enable("all") == frozenset(), otel.enabled_groups()
        assert otel.enabled_groups() == frozenset()
        assert not otel.LAYER
        assert sites.Layer().forward(1) == 2
        assert sites.save([]) == "saved"
        assert otel.start_span("megatron.layer.forward") is None
        assert not [m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m]]
        print("inert")
        """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=with_pythonpath(rendered.root)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "inert"
    assert "opentelemetry is not installed" in result.stderr


def test_rendered_lines_fit_megatron_line_length() -> None:
    for path, text in render_runtime(make_project("megatron/core/otel")).items():
        long = [n for n, line in enumerate(text.splitlines(), 1) if len(line) > 100]
        assert long == [], (path, long)


# --- traced (decorator form) -------------------------------------------------------------------


def test_traced_function_records_only_while_its_group_is_on(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    assert sites.save_and_time.__name__ == "save_and_time"
    assert sites.save_and_time.__doc__ == "Save and time."
    assert sites.save_and_time(4) == 4
    otel.enable("layer", tracer_provider=provider)
    assert sites.save_and_time(5) == 5
    assert exporter.get_finished_spans() == ()
    otel.enable("checkpoint", tracer_provider=provider)
    assert sites.save_and_time(6, None) == 6
    assert sites.save_and_time(iteration=7, tag="final") == 7
    first, second = exporter.get_finished_spans()
    assert dict(first.attributes or {}) == {
        "megatron.span_group": "checkpoint",
        "is_goodput_span": True,
        "megatron.iteration": 6,
        "megatron.tag": "periodic",
    }
    assert (second.attributes or {})["megatron.iteration"] == 7
    assert (second.attributes or {})["megatron.tag"] == "final"


def test_traced_function_exception_recorded_and_reraised(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    otel.enable("checkpoint", tracer_provider=provider)
    with pytest.raises(OSError, match="disk full"):
        sites.save_and_time(1, "boom")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_traced_with_unknown_span_name_leaves_function_alone(
    otel: ModuleType, sites: ModuleType, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    otel.enable("all", tracer_provider=provider)
    assert sites.untraced() == "plain"
    assert sites.untraced.__code__.co_name == "untraced"
    assert exporter.get_finished_spans() == ()
