"""The docs and the code come from one source: every documented name is emitted, and back."""

from __future__ import annotations

import re

from codegen.pipeline import Generation
from tests.support.spans_in_code import documented_names, emitted_by_instrumented_code, emitted_by_runtime


def test_every_emitted_name_is_documented_and_every_documented_name_is_emitted(
    generation: Generation,
) -> None:
    documented = documented_names(generation)
    emitted = emitted_by_instrumented_code(generation) | emitted_by_runtime(generation)
    assert emitted - documented == set(), "emitted but undocumented"
    assert documented - emitted == set(), "documented but never emitted"
    # 55 taxonomy rows: megatron.layer.forward is two rows (Mamba and Transformer), row 40 two names;
    # the inference server's 8 (specs/inference.yaml, beyond the reference taxonomy) and the
    # dynamic engine's step (specs/inference_engine.yaml)
    assert len(documented) == 55 + 8 + 1
    assert "megatron.inference.step" in documented


def test_help_text_advertises_only_declared_presets(generation: Generation) -> None:
    arguments = generation.changes["megatron/training/arguments.py"][1]
    presets = {p.name for p in generation.project.presets}
    assert "full" not in presets
    call = arguments[arguments.index('"--otel-span-groups"') :].split("\n    )\n")[0]
    help_text = "".join(re.findall(r'"([^"]*)"', call[call.index("help=") :]))
    advertised = set(re.search(r"presets \(([^)]*)\)", help_text).group(1).split(", "))  # type: ignore[union-attr]
    assert advertised == presets
