"""Megatron-LM main instrumented by the specs (the snapshot without #6438; #6415's base layer,
``megatron/core/telemetry/``, in it): one telemetry layer (issue 25, item 3).

- #6415's own unit tests (``tests/unit_tests/telemetry/`` of the snapshot) pass on the tree;
- the runtime resolves span-group specs against the tree's ``MegatronSpanGroup``: every preset
  and group means what it means there, and a preset added there is one here (no second registry);
- #6438's flags, parsed by the tree's own ``parse_args``, configure the runtime.

Main's training code uses ``typing.override`` (Python 3.12): the test processes run 3.11 with a
``sitecustomize`` giving it the identity decorator (main_tree.py), never the generated code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

for _module in ("torch", "triton", "numpy"):
    pytest.importorskip(_module, reason=f"{_module} is needed to import megatron")

from tests.megatron_cpu.main_tree import run_python


def _ok(result) -> str:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def test_the_base_layers_own_unit_tests_pass_on_the_instrumented_tree(
    main_root: Path, main_shims: Path
) -> None:
    code = (
        "import sys, pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '--noconftest', "
        "'-W', 'ignore', 'tests/unit_tests/telemetry']))"
    )
    out = _ok(run_python(main_root, main_shims, code))
    passed = re.search(r"(\d+) passed", out)
    assert passed is not None and int(passed.group(1)) >= 80, out[-2000:]
    assert "failed" not in out and "error" not in out.lower().split("passed")[-1], out[-2000:]


REGISTRY = """\
import json
from megatron.core.telemetry.span_groups import MegatronSpanGroup as M
M._PRESETS = {**M._PRESETS, "attention_only": frozenset({"layer"})}  # a preset the tree adds
from megatron.core import otel
print(json.dumps({
    "presets": {name: sorted(otel.resolve(name)) for name in M._PRESETS},
    "tree": {name: sorted(groups) for name, groups in M._PRESETS.items()},
    "groups": sorted(g for g in M.ALL_GROUPS if otel.resolve(g.upper()) == {g}),
    "all_groups": sorted(M.ALL_GROUPS),
    "runtime_groups": sorted(otel.GROUPS),
}))
"""


def test_span_groups_resolve_against_the_trees_own_registry(main_root: Path, main_shims: Path) -> None:
    seen = json.loads(_ok(run_python(main_root, main_shims, REGISTRY)).splitlines()[-1])
    # the groups only the specs declare (the tree's registry lacks them): kept, and in the presets
    # the specs declare as every group ("*")
    specs_only = sorted(set(seen["runtime_groups"]) - set(seen["all_groups"]))
    assert specs_only == ["inference_steps"]
    every = {"profiling", "all"}
    assert {n: g for n, g in seen["presets"].items() if n not in every} == {
        n: g for n, g in seen["tree"].items() if n not in every
    }
    for name in every:
        assert seen["presets"][name] == sorted(seen["tree"][name] + specs_only), name
    assert seen["presets"]["attention_only"] == ["layer"]
    assert seen["groups"] == seen["all_groups"]


FLAGS = """\
import json, sys
from megatron.training.arguments import parse_args
from megatron.core import otel
from megatron.core.telemetry.span_groups import MegatronSpanGroup as M
sys.argv = ["pretrain_gpt.py", "--otel-enabled", "--otel-service-name", "svc",
            "--otel-span-groups", "per_step,Layer"]
args = parse_args()
settings = otel._config.read_settings(args)
print(json.dumps({
    "enabled": settings.enabled, "service": settings.service_name,
    "groups": sorted(settings.span_groups),
    "expected": sorted(M._PRESETS["per_step"] | {"layer"}),
}))
"""


def test_the_flags_of_6438_configure_the_runtime(main_root: Path, main_shims: Path) -> None:
    seen = json.loads(_ok(run_python(main_root, main_shims, FLAGS)).splitlines()[-1])
    assert (seen["enabled"], seen["service"]) == (True, "svc")
    assert seen["groups"] == seen["expected"]
