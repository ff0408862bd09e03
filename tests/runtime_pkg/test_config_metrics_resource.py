"""configure(): environment, flags and their validation; metric instruments; resource attributes."""

from __future__ import annotations

import logging
import sys
import uuid
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from runtime_pkg_support import POS, make_project, render_into

from codegen.diagnostics import SpecError
from codegen.spec.load import load_project
from codegen.spec.model import EnvVar, Project


@pytest.fixture
def provider() -> TracerProvider:
    return TracerProvider(shutdown_on_exit=False)


def megatron_args(**overrides: object) -> SimpleNamespace:
    values: dict[str, object] = {
        "otel_enabled": False,
        "otel_service_name": None,
        "otel_span_groups": None,
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 4,
        "data_parallel_size": 8,
        "global_batch_size": 512,
        "seq_length": 4096,
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "train_iters": 1000,
        "micro_batch_size": 1,
        "ckpt_format": "torch_dist",
        "fp16": False,
        "bf16": True,
    }
    values.update(overrides)
    return SimpleNamespace(**values)


# --- configuration -----------------------------------------------------------------------------


def test_disabled_by_default(otel: ModuleType, provider: TracerProvider, exit_hooks) -> None:
    assert otel.configure(megatron_args(), tracer_provider=provider) == frozenset()
    assert otel.enabled_groups() == frozenset() and otel.METRICS is False
    assert exit_hooks["atexit"] == []


def test_environment_enables_the_default_preset(
    otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", "true")
    assert otel.configure(tracer_provider=provider) == {"job", "checkpoint"}
    monkeypatch.setenv("MEGATRON_OTEL_SPAN_GROUPS", "Per_Step, layer")
    assert otel.configure(tracer_provider=provider) == set(otel.GROUPS)
    assert (otel.JOB, otel.LAYER) == (True, True)


def test_flags_override_the_environment(
    otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_SPAN_GROUPS", "bogus")  # overridden, so never parsed
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("MEGATRON_OTEL_EXPORTER", "none")
    args = megatron_args(otel_enabled=True, otel_span_groups="layer", otel_service_name="flagged")
    assert otel.configure(args) == {"layer"}
    tracer_provider = otel._state.PROCESS.run.owned[0]
    assert tracer_provider.resource.attributes["service.name"] == "flagged"
    assert tracer_provider.resource.attributes["megatron.precision"] == "bf16"
    assert tracer_provider.resource.attributes["dl.tensor_parallel.size"] == 2


@pytest.mark.parametrize(("env", "service"), [({}, "megatron-lm"), ({"OTEL_SERVICE_NAME": "svc"}, "svc")])
def test_sdk_providers_built_when_none_passed(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], service: str
) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", "1")
    monkeypatch.setenv("MEGATRON_OTEL_EXPORTER", "none")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert otel.configure() == {"job", "checkpoint"}
    tracer_provider, meter_provider = otel._state.PROCESS.run.owned
    assert isinstance(tracer_provider, TracerProvider)
    assert isinstance(meter_provider, MeterProvider)
    assert tracer_provider.resource.attributes["service.name"] == service
    assert otel.METRICS is True


def test_traces_and_metrics_switch_separately(
    otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", "1")
    monkeypatch.setenv("MEGATRON_OTEL_TRACES_ENABLED", "0")
    assert otel.configure(tracer_provider=provider, meter_provider=meters) == frozenset()
    assert otel.METRICS is True
    monkeypatch.setenv("MEGATRON_OTEL_TRACES_ENABLED", "1")
    monkeypatch.setenv("MEGATRON_OTEL_METRICS_ENABLED", "off")
    assert otel.configure(tracer_provider=provider, meter_provider=meters) == {"job", "checkpoint"}
    assert otel.METRICS is False


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("MEGATRON_OTEL_ENABLED", "maybe", ["MEGATRON_OTEL_ENABLED", "'maybe'", "true", "0"]),
        ("MEGATRON_OTEL_EXPORTER", "zipkin", ["MEGATRON_OTEL_EXPORTER", "otlp, console, none"]),
        ("MEGATRON_OTEL_SPAN_GROUPS", "full", ["MEGATRON_OTEL_SPAN_GROUPS", "'full'", "per_step"]),
        ("MEGATRON_OTEL_EXPORT_RANK", "-3", ["MEGATRON_OTEL_EXPORT_RANK", "-1 (the last rank)"]),
        ("MEGATRON_OTEL_EXPORT_RANK", "last", ["MEGATRON_OTEL_EXPORT_RANK", "-1 (the last rank)"]),
        ("MEGATRON_OTEL_EXPORT_RANK", "4", ["MEGATRON_OTEL_EXPORT_RANK=4", "0..3"]),
        ("MEGATRON_OTEL_METRICS_ENABLED", "2", ["MEGATRON_OTEL_METRICS_ENABLED"]),
        ("MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S", "-1", ["SIGTERM_FLUSH_TIMEOUT_S", ">= 0"]),
        ("MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S", "nan", ["SIGTERM_FLUSH_TIMEOUT_S", ">= 0"]),
    ],
)
def test_invalid_values_fail_fast_naming_variable_and_valid_values(
    otel: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
    expected: list[str],
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv(name, value)  # invalid even while telemetry is off: uniform on every rank
    with pytest.raises(ValueError) as info:
        otel.configure()
    for text in expected:
        assert text in str(info.value)


def test_invalid_flag_value_names_the_flag(otel: ModuleType) -> None:
    with pytest.raises(ValueError, match="--otel-span-groups: unknown span group or preset 'ful'"):
        otel.configure(megatron_args(otel_span_groups="default,ful"))


def test_env_table_comes_from_the_specs(importable, unique_top: str) -> None:
    project = make_project(f"{unique_top}/otel")
    env = tuple(
        (
            EnvVar("MEGATRON_OTEL_EXPORTER", "console", "", POS, ("console", "none"))
            if var.name == "MEGATRON_OTEL_EXPORTER"
            else var
        )
        for var in project.env
    )
    project = Project(**{**project.__dict__, "env": env})
    otel = render_into(importable, project).import_runtime()
    assert otel._taxonomy.ENV["exporter"] == ("MEGATRON_OTEL_EXPORTER", "console", ("console", "none"))
    assert otel._taxonomy.ENV["enabled"] == ("MEGATRON_OTEL_ENABLED", "0", ())
    assert otel._taxonomy.ENV["exporter"].choices == ("console", "none")  # a named record
    assert otel._taxonomy.ENV_TIMESTAMPS["MEGATRON_OTEL_PRE_SRUN_TIME"] == "pre_srun"
    assert otel._taxonomy.FLAG_OVERRIDES[0] == (
        "otel_enabled",
        "MEGATRON_OTEL_ENABLED",
        "--otel-enabled",
        True,
    )
    with pytest.raises(ValueError, match="valid values: console, none"):
        otel._config.read_settings(environ={"MEGATRON_OTEL_EXPORTER": "otlp"})


@pytest.mark.parametrize(
    ("telemetry", "message"),
    [
        ("lifecycle:\n  shutdown: {name: x, group: layer}\n", "unknown key in lifecycle 'shutdown'"),
        (
            "lifecycle:\n  phases:\n    - {name: x, group: layer, start: a}\n",
            "lifecycle phase is missing 'end'",
        ),
        ("lifecycle:\n  interval: {name: x, group: nope}\n", "unknown group 'nope'"),
        ("metrics:\n  - {name: m, kind: summary, unit: '1'}\n", "unknown metric kind 'summary'"),
        ("env:\n  - {name: MEGATRON_OTEL_EXPORTER, default: otlp, choices: [otlp, zipkin]}\n", "zipkin"),
    ],
)
def test_what_the_runtime_cannot_do_is_a_spec_error(telemetry: str, message: str, tmp_path) -> None:
    """Checked in spec/ with the spec location, before anything is rendered (no ValueError from
    the renderer)."""
    fixture = (Path(__file__).resolve().parents[1] / "fixtures" / "telemetry.yaml").read_text()
    if telemetry.startswith("metrics:"):
        fixture = fixture.split("metrics:\n")[0]  # the fixture's own metrics close the file
    (tmp_path / "telemetry.yaml").write_text(fixture + telemetry)
    with pytest.raises(SpecError) as raised:
        load_project(tmp_path)
    assert message in raised.value.diagnostics.render()
    assert "telemetry.yaml:" in raised.value.diagnostics.render()


# --- metrics -----------------------------------------------------------------------------------


def metric_points(reader: InMemoryMetricReader) -> dict[str, tuple[str, list[object]]]:
    data = reader.get_metrics_data()
    out: dict[str, tuple[str, list[object]]] = {}
    for resource_metrics in data.resource_metrics if data else ():
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                points = list(metric.data.data_points)
                values = [getattr(p, "value", None) or getattr(p, "sum", None) for p in points]
                out[metric.name] = (metric.unit, values)
    return out


@pytest.fixture
def metrics_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", "1")
    monkeypatch.setenv("MEGATRON_OTEL_TRACES_ENABLED", "0")


def test_metrics_recorded_with_units_none_skipped_counters_positive(
    otel: ModuleType, metrics_on: None, caplog: pytest.LogCaptureFixture
) -> None:
    reader = InMemoryMetricReader()
    otel.configure(meter_provider=MeterProvider(metric_readers=[reader], shutdown_on_exit=False))
    assert otel.METRICS is True
    with caplog.at_level(logging.WARNING, logger=otel.__name__):
        for skipped in (0, 2, 0):
            otel.METRICS and otel.record_metrics(
                lambda: {
                    "megatron.training.step_duration_ms": 250.0,
                    "megatron.training.loss": 2.5,
                    "megatron.training.throughput_tflops": None,
                    "megatron.training.tokens_per_sec": 1000.0,
                    "megatron.training.skipped_iters": skipped,
                    "megatron.training.learning_rate": 3e-4,
                    "megatron.training.memory_allocated_gb": 12.5,
                    "megatron.training.unknown": 1.0,
                }
            )
    points = metric_points(reader)
    assert points["megatron.training.step_duration_ms"][0] == "ms"
    assert points["megatron.training.loss"] == ("1", [2.5])
    assert points["megatron.training.tokens_per_sec"] == ("tokens/s", [1000.0])
    assert points["megatron.training.skipped_iters"] == ("1", [2])
    assert points["megatron.training.memory_allocated_gb"] == ("GB", [12.5])
    assert "megatron.training.throughput_tflops" not in points  # only None was given
    assert "megatron.training.grad_norm" not in points
    unknown = [r for r in caplog.records if "megatron.training.unknown" in r.getMessage()]
    assert len(unknown) == 1


def test_instruments_created_once_per_meter(otel: ModuleType, metrics_on: None) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    created: list[str] = []
    meter = provider.get_meter("megatron")
    real = meter.create_histogram
    meter.create_histogram = lambda name, **kw: created.append(name) or real(name, **kw)
    wrapper = SimpleNamespace(get_meter=lambda *a, **k: meter, force_flush=lambda *a: True)
    for _ in range(3):
        otel.configure(meter_provider=wrapper)
        otel.record_metrics(lambda: {"megatron.training.step_duration_ms": 1.0})
        otel.reset()
    assert created == ["megatron.training.step_duration_ms"]


def test_gauge_falls_back_to_observable_gauge(otel: ModuleType, metrics_on: None) -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader], shutdown_on_exit=False).get_meter("megatron")

    class OldMeter:  # an API before create_gauge
        def __getattr__(self, name: str) -> object:
            if name == "create_gauge":
                raise AttributeError(name)
            return getattr(meter, name)

    otel.configure(meter_provider=SimpleNamespace(get_meter=lambda *a, **k: OldMeter()))
    otel.record_metrics(lambda: {"megatron.training.grad_norm": 0.75})
    assert metric_points(reader)["megatron.training.grad_norm"] == ("1", [0.75])


def test_metric_values_that_raise_are_logged_once(
    otel: ModuleType, metrics_on: None, caplog: pytest.LogCaptureFixture
) -> None:
    otel.configure(meter_provider=MeterProvider(shutdown_on_exit=False))
    with caplog.at_level(logging.WARNING, logger=otel.__name__):
        otel.record_metrics(lambda: {"megatron.training.loss": 1 / 0})
        otel.record_metrics(lambda: {"megatron.training.loss": 1 / 0})
    ours = [r for r in caplog.records if r.name == otel.__name__]
    assert [r.getMessage() for r in ours] == ["telemetry: evaluating metric values failed"]


def test_record_metrics_when_off_evaluates_nothing(otel: ModuleType) -> None:
    calls: list[int] = []
    otel.record_metrics(lambda: calls.append(1) or {})
    assert calls == [] and otel.METRICS is False


# --- resource attributes -----------------------------------------------------------------------


def test_resource_attributes_from_args_and_environment(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "eos")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    attributes = otel.resource_attributes(megatron_args(fp16=True, bf16=False))
    assert {k: v for k, v in attributes.items() if not k.endswith("uuid")} == {
        "dl.local_rank": 3,
        "dl.tensor_parallel.size": 2,
        "dl.pipeline_parallel.size": 4,
        "dl.data_parallel.size": 8,
        "dl.batch_size": 512,
        "dl.sequence_length": 4096,
        "megatron.num_layers": 32,
        "megatron.hidden_size": 4096,
        "megatron.num_attention_heads": 32,
        "megatron.train_iters": 1000,
        "megatron.micro_batch_size": 1,
        "megatron.ckpt_format": "torch_dist",
        "megatron.precision": "fp16",
        "slurm.job.id": "4242",
        "slurm.cluster": "eos",
        "slurm.restart_count": 1,
    }
    assert uuid.UUID(attributes["job_uuid"]).version == 5
    assert otel._resource.precision(megatron_args(bf16=False)) == "fp32"
    assert otel.resource_attributes() == {
        k: v for k, v in attributes.items() if k.startswith(("dl.local", "slurm", "job", "run"))
    }


def test_gpu_identity_is_empty_without_pynvml_and_read_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from codegen.otel_runtime import _resource  # the runtime's source module, imported directly

    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert _resource.gpu_identity(0) == {}
    calls: list[str] = []
    fake = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=lambda handle: b"NVIDIA H100",
        nvmlDeviceGetUUID=lambda handle: "GPU-1234",
        nvmlDeviceGetSerial=lambda handle: "S1",
        nvmlDeviceGetPciInfo=lambda handle: SimpleNamespace(busId=b"00000000:1B:00.0"),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert _resource.gpu_identity(1) == {
        "dl.gpu.index": 1,
        "dl.gpu.name": "NVIDIA H100",
        "dl.gpu.uuid": "GPU-1234",
        "dl.gpu.serial": "S1",
        "dl.gpu.pci_bus_id": "00000000:1B:00.0",
    }
    assert calls == ["init", "shutdown"]
    fake.nvmlDeviceGetHandleByIndex = lambda index: 1 // 0
    assert _resource.gpu_identity(0) == {}


def test_slurm_mapping_and_deterministic_uuids() -> None:
    from codegen.otel_runtime import _resource  # the runtime's source module, imported directly

    slurm = _resource.slurm_attributes
    base = {"SLURM_JOB_ID": "100", "SLURM_CLUSTER_NAME": "eos", "SLURM_JOB_NAME": "gpt"}
    first = slurm(base)
    assert first == slurm(dict(base))  # deterministic
    assert first["slurm.job.name"] == "gpt"
    restarted = slurm({**base, "SLURM_RESTART_COUNT": "1"})
    assert restarted["job_uuid"] == first["job_uuid"]
    assert restarted["run_uuid"] != first["run_uuid"]
    elastic = slurm({**base, "TORCHELASTIC_RESTART_COUNT": "2"})
    assert elastic["slurm.torchelastic.restart_count"] == 2
    assert elastic["run_uuid"] not in (first["run_uuid"], restarted["run_uuid"])
    other_cluster = slurm({**base, "SLURM_CLUSTER_NAME": "dfw"})
    assert other_cluster["job_uuid"] != first["job_uuid"]
    # array tasks: the array job and task id, not the per-task job id, name the job
    task = {"SLURM_ARRAY_JOB_ID": "90", "SLURM_ARRAY_TASK_ID": "3", "SLURM_CLUSTER_NAME": "eos"}
    one = slurm({**task, "SLURM_JOB_ID": "101"})
    assert one["slurm.array.job_id"] == "90" and one["slurm.array.task_id"] == "3"
    assert one["job_uuid"] == slurm({**task, "SLURM_JOB_ID": "999"})["job_uuid"]
    assert one["job_uuid"] != slurm({**task, "SLURM_ARRAY_TASK_ID": "4"})["job_uuid"]
    assert one["job_uuid"] == str(uuid.uuid5(_resource.NAMESPACE, "eos/90_3"))
    assert slurm({}) == {}
