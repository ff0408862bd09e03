"""A small project, its runtime rendered into a directory, and call sites that use it."""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from codegen.diagnostics import Pos
from codegen.emit.runtime import render_runtime
from codegen.spec.load import load_project
from codegen.spec.model import (
    EnvVar,
    Flag,
    Group,
    LifecycleSpan,
    Metric,
    Preset,
    Project,
    Region,
    Runtime,
    Span,
)
from codegen.upstream import UpstreamPin
from tests.support.modules import with_pythonpath
from tests.support.paths import SPECS

POS = Pos("specs/groups.yaml", 1, 1)

# Instrumented code exactly as the generator writes it; RUNTIME_PARENT is the runtime's parent module.
CALL_SITES = '''\
from RUNTIME_PARENT import otel


class Layer:
    layer_number = 7

    def forward(self, x):
        """doc"""
        _otel_span = otel.LAYER and otel.start_span(
            "megatron.layer.forward", lambda: {"megatron.layer_number": self.layer_number}
        )
        try:
            y = self.mlp(x)
            _otel_span and _otel_span.set_attributes(lambda: {"megatron.skipped": False})
            return y
        finally:
            _otel_span and _otel_span.end()

    def mlp(self, x):
        _otel_span = otel.LAYER and otel.start_span("megatron.layer.mlp")
        try:
            if x == "boom":
                raise KeyError("boom")
            return x + 1
        finally:
            _otel_span and _otel_span.end()


def save(calls):
    _otel_span = otel.CHECKPOINT and otel.start_span(
        "megatron.checkpoint.save", lambda: calls.append("attributes") or {"megatron.iteration": 3}
    )
    try:
        return "saved"
    finally:
        _otel_span and _otel_span.end()


def save_broken_attributes():
    _otel_span = otel.CHECKPOINT and otel.start_span(
        "megatron.checkpoint.save", lambda: {"megatron.iteration": 1 // 0}
    )
    try:
        result = "saved"
        _otel_span and _otel_span.set_attributes(lambda: {"megatron.bytes": [].pop()})
        return result
    finally:
        _otel_span and _otel_span.end()


@otel.traced("megatron.checkpoint.save", {"megatron.iteration": "iteration", "megatron.tag": "tag"})
def save_and_time(iteration, model=None, *, tag="periodic"):
    """Save and time."""
    if model == "boom":
        raise OSError("disk full")
    return iteration


@otel.traced("megatron.not.in.the.specs")
def untraced():
    return "plain"


def save_while_handling(fail):
    try:
        raise RuntimeError("being handled by the caller")
    except RuntimeError:
        if fail:
            return Layer().forward("boom")
        return save([])
'''


# The lifecycle, metrics and configuration of the real specs (taxonomy sections 3-5), abridged.
LIFECYCLE = (
    LifecycleSpan("startup", "megatron.startup", "job", POS, goodput=True),
    LifecycleSpan(
        "phase", "megatron.startup.launch_script", "job", POS, True, "launch_script_start", "pre_srun"
    ),
    LifecycleSpan("phase", "megatron.startup.container_load", "job", POS, True, "pre_srun", "program_start"),
    LifecycleSpan("phase", "megatron.startup.imports", "job", POS, True, "program_start", "main_entry"),
    LifecycleSpan("phase", "megatron.startup.arg_parse", "job", POS, True, "main_entry", "pretrain_entry"),
    LifecycleSpan("pre_startup", "pre_startup", "job", POS, True, "job_start", "launch_script_start"),
    LifecycleSpan("interval", "megatron.train", "job", POS, goodput=True),
)
METRICS = (
    Metric("megatron.training.step_duration_ms", "histogram", "ms", "time per iteration", POS),
    Metric("megatron.training.loss", "gauge", "1", "the interval's average lm loss", POS),
    Metric("megatron.training.throughput_tflops", "gauge", "TFLOP/s", "throughput", POS),
    Metric("megatron.training.tokens_per_sec", "gauge", "tokens/s", "tokens per second", POS),
    Metric("megatron.training.grad_norm", "gauge", "1", "gradient norm", POS),
    Metric("megatron.training.skipped_iters", "counter", "1", "skipped iterations", POS),
    Metric("megatron.training.learning_rate", "gauge", "1", "learning rate", POS),
    Metric("megatron.training.memory_allocated_gb", "gauge", "GB", "peak memory", POS),
)
ENV = (
    EnvVar("MEGATRON_OTEL_ENABLED", "0", "turn telemetry on", POS),
    EnvVar("MEGATRON_OTEL_SPAN_GROUPS", "default", "span groups to record", POS),
    EnvVar("MEGATRON_OTEL_EXPORTER", "otlp", "exporter", POS, ("otlp", "console", "none")),
    EnvVar("MEGATRON_OTEL_TRACES_ENABLED", "1", "record spans", POS),
    EnvVar("MEGATRON_OTEL_METRICS_ENABLED", "1", "record metrics", POS),
    EnvVar("MEGATRON_OTEL_EXPORT_RANK", "-1", "the exporting rank; -1: last", POS),
    EnvVar("MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S", "0", "drain on SIGTERM", POS),
    EnvVar("MEGATRON_OTEL_JOB_START_TIME", "", "job start", POS, timestamp="job_start"),
    EnvVar("MEGATRON_OTEL_LAUNCH_SCRIPT_START_TIME", "", "launch", POS, timestamp="launch_script_start"),
    EnvVar("MEGATRON_OTEL_PRE_SRUN_TIME", "", "before srun", POS, timestamp="pre_srun"),
)
FLAGS = (
    Flag("--otel-enabled", "otel_enabled", "", POS, "store_true", env="MEGATRON_OTEL_ENABLED"),
    Flag("--otel-service-name", "otel_service_name", "", POS, env="OTEL_SERVICE_NAME"),
    Flag("--otel-span-groups", "otel_span_groups", "", POS, env="MEGATRON_OTEL_SPAN_GROUPS"),
)


def make_project(package: str, *, default_preset: bool = True, telemetry: bool = True) -> Project:
    """A four-group project; with ``telemetry``, also lifecycle spans, metrics, env and flags."""

    def span(name: str, group: str, goodput: bool = False) -> Span:
        return Span(name, group, "megatron/x.py", "f", Region("function", POS), POS, goodput=goodput)

    presets = [
        Preset("per_step", ("default", "step"), POS),
        Preset("profiling", ("per_step", "layer"), POS),
        Preset("all", ("*",), POS),
    ]
    if default_preset:
        presets.insert(0, Preset("default", ("job", "checkpoint"), POS))
    return Project(
        runtime=Runtime(package, POS),
        upstream=UpstreamPin("megatron-core", "0.19.2", "megatron_core.tar.gz", "0" * 64),
        groups=tuple(Group(n, f"{n} spans", POS) for n in ("job", "checkpoint", "step", "layer")),
        presets=tuple(presets),
        spans=(
            span("megatron.layer.forward", "layer"),
            span("megatron.layer.mlp", "layer"),
            span("megatron.checkpoint.save", "checkpoint", goodput=True),
            span("megatron.train.iteration", "step", goodput=True),
            span("megatron.layer.forward", "layer"),  # a second site with the same name
        ),
        lifecycle=LIFECYCLE if telemetry else (),
        metrics=METRICS if telemetry else (),
        env=ENV if telemetry else (),
        flags=FLAGS if telemetry else (),
    )


@dataclass
class Rendered:
    root: Path  # the source root the package was written under
    project: Project
    files: dict[str, str]

    @property
    def parent_module(self) -> str:
        return self.project.runtime.parent_module

    def import_runtime(self) -> ModuleType:
        return importlib.import_module(self.project.runtime.module)

    def import_call_sites(self) -> ModuleType:
        return importlib.import_module(f"{self.parent_module}.sites")


def render_into(root: Path, project: Project) -> Rendered:
    files = render_runtime(project)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    parent = project.runtime.parent_module
    sites = root / parent.replace(".", "/") / "sites.py"
    sites.write_text(CALL_SITES.replace("RUNTIME_PARENT", parent), encoding="utf-8")
    return Rendered(root, project, files)


def specs_runtime_in_memory(root: Path, top: str, monkeypatch: Any, groups: str) -> SimpleNamespace:
    """The runtime rendered from the real specs as ``TOP/core/otel`` into ``root`` and configured,
    ``groups`` on, on SDK providers that keep what they record: ``otel``, its ``spans`` (an
    in-memory exporter), its metric ``reader`` and the groups configure() ``enabled``."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tests.support.processors import in_memory

    project = load_project(SPECS)
    runtime = dataclasses.replace(project.runtime, package=f"{top}/core/otel")
    otel = render_into(root, dataclasses.replace(project, runtime=runtime)).import_runtime()
    tracer_provider, spans = in_memory()
    reader = InMemoryMetricReader()
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", "1")
    monkeypatch.setenv("MEGATRON_OTEL_SPAN_GROUPS", groups)
    meter_provider = MeterProvider(metric_readers=[reader])
    enabled = otel.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return SimpleNamespace(otel=otel, spans=spans, reader=reader, enabled=enabled)


# -- scripts run in a subprocess on a rendered runtime (test_process_exit.py and others)

PRELUDE = """\
import os, signal, sys, time
import importlib
otel = importlib.import_module({module!r})
STAMPS = {{"program_start": time.time() - 5, "main_entry": time.time() - 1}}

def pretrain(iterations=4, save_interval=2, fail=None):
    otel.configure()
    otel.startup(STAMPS)
    otel.begin_training(0, save_interval)
    try:
        for iteration in range(iterations):
            otel.train_iteration(iteration)
            span = otel.STEP and otel.start_span("megatron.train.iteration")
            try:
                if fail is not None and iteration == iterations - 1:
                    fail()
            finally:
                span and span.end()
    finally:
        otel.end_training()
"""


def run_script(
    rendered: Rendered, body: str, *, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    script = PRELUDE.format(root=str(rendered.root), module=rendered.project.runtime.module)
    script += textwrap.dedent(body)
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MEGATRON_OTEL_", "OTEL_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE")
    }
    environ.update(
        {
            "MEGATRON_OTEL_ENABLED": "1",
            "MEGATRON_OTEL_SPAN_GROUPS": "all",
            "MEGATRON_OTEL_EXPORTER": "console",
            "MEGATRON_OTEL_METRICS_ENABLED": "0",
            "OTEL_BSP_SCHEDULE_DELAY": "3600000",  # nothing is exported unless flushed
        }
    )
    environ = with_pythonpath(rendered.root, env=environ)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environ, timeout=timeout
    )


def span_names(stdout: str) -> list[str]:
    """Names of the spans ConsoleSpanExporter printed (top-level "name" of each JSON object)."""
    return re.findall(r'^    "name": "([^"]+)"', stdout, re.MULTILINE)
