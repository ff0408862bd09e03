"""The flags the specs insert into Megatron's own argument parser, parsed by megatron.training.

megatron/training uses ``typing.override`` (Python 3.12); the CPU torch build here is for 3.11,
so the subprocess gives 3.11 the identity decorator 3.12 has before importing it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

for _module in ("torch", "triton", "numpy"):
    pytest.importorskip(_module, reason=f"{_module} is needed to import megatron.training")

from codegen.spec.load import load_project
from tests.support.megatron_workers import parse_flags, worker_env

SPECS = Path(__file__).resolve().parents[2] / "specs"


def _run(fork_root: Path, argv: list[str], **env: str) -> dict:
    return parse_flags(argv, {**worker_env(fork_root), "MEGATRON_OTEL_EXPORTER": "none", **env})


def test_otel_flags_parse_and_configure_the_runtime(fork_root: Path) -> None:
    out = _run(
        fork_root, ["--otel-enabled", "--otel-span-groups", "default,layer", "--otel-service-name", "svc"]
    )
    assert out["enabled"] is True and out["span_groups"] == "default,layer" and out["service_name"] == "svc"
    assert out["groups"] == ["checkpoint", "evaluate", "first_iteration", "inference", "job", "layer"]


def test_flags_override_the_environment_and_absent_flags_defer_to_it(fork_root: Path) -> None:
    assert _run(fork_root, [], MEGATRON_OTEL_ENABLED="0")["groups"] == []
    env_only = _run(fork_root, [], MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_SPAN_GROUPS="microbatch")
    assert env_only["enabled"] is False and env_only["groups"] == ["microbatch"]
    flag_wins = _run(
        fork_root, ["--otel-enabled", "--otel-span-groups", "layer"], MEGATRON_OTEL_SPAN_GROUPS="microbatch"
    )
    assert flag_wins["groups"] == ["layer"]


def test_help_lists_the_declared_presets(fork_root: Path) -> None:
    # `pretrain --help` itself fails in megatron-core 0.19.2, pristine too (a help string with a
    # stray "%"), so the help text is read from the parser's actions and formatted one by one.
    script = """\
import argparse, json, typing
typing.override = getattr(typing, "override", lambda f: f)
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
formatter = parser._get_formatter()
print(json.dumps({
    a.option_strings[0]: formatter._expand_help(a)
    for a in parser._actions if a.option_strings and a.option_strings[0].startswith("--otel")
}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], env=worker_env(fork_root), capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
    helps = json.loads(result.stdout.strip().splitlines()[-1])
    declared = load_project(SPECS).flags
    assert sorted(helps) == sorted(flag.option for flag in declared)
    assert len(declared) >= 4
    groups_help = helps["--otel-span-groups"]
    assert groups_help.startswith(
        "Comma-separated span presets (default, per_step, profiling, all) and/or groups (job,"
    )
    assert "full" not in groups_help
