"""#6438's user surface keeps working on an instrumented tree: every flag, variable, group and
preset it accepts is accepted here with the same meaning; each difference is in
``docs/reference/main-compatibility.md`` with its reason (issue 25, item 3)."""

from __future__ import annotations

import ast
import os

from codegen.diagnostics import Diagnostics
from codegen.spec.load import load_project
from tests.support.upstream_main import snapshot
from tests.upstream import main_surface as surface


def _surfaces() -> tuple[surface.Surface, surface.Surface]:
    return surface.upstream_surface(snapshot("with")), surface.our_surface()


def test_every_flag_of_6438_is_accepted_alike() -> None:
    upstream, ours = _surfaces()
    assert set(upstream.flags) == {"--otel-enabled", "--otel-service-name", "--otel-span-groups"}
    for option, kind in upstream.flags.items():
        assert ours.flags.get(option) == kind, option


def test_every_variable_6438_reads_is_read() -> None:
    upstream, ours = _surfaces()
    assert {"MEGATRON_OTEL_ENABLED", "MEGATRON_OTEL_SPAN_GROUPS"} <= set(upstream.variables)
    assert [v for v in upstream.variables if v not in ours.variables] == []


def test_the_groups_and_presets_are_the_base_layers() -> None:
    """The base layer's groups and presets, besides the groups added here with their reason."""
    upstream, ours = _surfaces()
    added = {group for group in ours.groups - upstream.groups if f"group {group}" in surface.REASONS}
    assert added == {"inference_steps"}
    assert upstream.groups == ours.groups - added
    assert upstream.presets == {name: members - added for name, members in ours.presets.items()}


def test_every_difference_has_a_reason() -> None:
    upstream, ours = _surfaces()
    keys = [key for key, _, _ in surface.differences(upstream, ours)]
    assert [key for key in keys if key not in surface.REASONS] == []
    assert [key for key in surface.REASONS if key not in keys] == [], "a reason for no difference"


def test_the_compatibility_page_is_current() -> None:
    text = surface.render(*_surfaces())
    if os.environ.get("CODEGEN_REGENERATE"):
        surface.PAGE.write_text(text)
    assert surface.PAGE.read_text() == text, "stale: CODEGEN_REGENERATE=1 pytest tests/upstream"


def test_the_metric_instruments_are_the_base_layers_names() -> None:
    """#6415's training_metrics names the eight instruments (MEGATRON_TRAINING_* constants); the
    runtime records the same names (with the units the base layer leaves out)."""
    source = (snapshot("with") / "megatron/core/telemetry/training_metrics.py").read_text()
    names = {
        node.value.value
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id.startswith("MEGATRON_TRAINING_")
        and isinstance(node.value, ast.Constant)
    }
    project = load_project(surface.REPO / "specs", Diagnostics())
    assert len(names) == 8
    # besides the inference server's, named by the GenAI semantic conventions, and the dynamic
    # engine's megatron.inference.* (issue 40)
    serving = ("gen_ai.", "megatron.inference.")
    assert {m.name for m in project.metrics if not m.name.startswith(serving)} == names
