"""A small project, its runtime rendered into a directory, and call sites that use it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from codegen.diagnostics import Pos
from codegen.emit.runtime import render_runtime
from codegen.spec.model import Group, Preset, Project, Region, Runtime, Span
from codegen.upstream import UpstreamPin

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


def save_while_handling(fail):
    try:
        raise RuntimeError("being handled by the caller")
    except RuntimeError:
        if fail:
            return Layer().forward("boom")
        return save([])
'''


def make_project(package: str, *, default_preset: bool = True) -> Project:
    def span(name: str, group: str, goodput: bool = False) -> Span:
        return Span(
            name, group, "megatron/x.py", "f", Region("function", POS), POS, goodput=goodput
        )

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
    )


@dataclass
class Rendered:
    root: Path  # the source root the package was written under
    project: Project
    files: dict[str, str]

    @property
    def parent_module(self) -> str:
        return self.project.runtime.parent_module

    @property
    def init_path(self) -> Path:
        return self.root / self.project.runtime.package / "__init__.py"

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
