"""README "Review and carry the patches", the parts that run megatron: the fork block, the
``layer_example.py`` file, the console-exporter run into ``capture.json`` with ``codegen verify``
accepting it, the flags and environment of the "turn it on" block parsed by megatron.training, and
the OTLP block's run without the exporter installed.

Every command runs as the README writes it (``bash -e``), in a workspace holding this repository
as ``megatron-otel-codegen/`` (see tests/support/doc_blocks.py). Nothing is redirected for the CPU:
the example runs megatron-core's TransformerLayer as is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

for _module in ("torch", "triton", "numpy"):
    pytest.importorskip(_module, reason=f"{_module} is needed to import megatron")

from tests.support.doc_blocks import blocks, run_block, workspace
from tests.support.megatron_workers import parse_flags
from tests.support.ports import free_port

EXAMPLE = "layer_example.py"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    env.pop("PYTHONPATH", None)
    env.update(MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    return env


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace after the fork block, with the README's example file written."""
    root = workspace(tmp_path_factory.mktemp("readme"))
    run_block("fork", root, env=_clean_env())
    (root / EXAMPLE).write_text(blocks()[f"file {EXAMPLE}"], encoding="utf-8")
    return root


def test_console_block_captures_spans_that_verify_accepts(work: Path) -> None:
    output = run_block("console", work, env=_clean_env(), timeout=400)
    assert "3 spans, 3 distinct names checked: 0 findings" in output
    captured = []
    decoder, text, index = json.JSONDecoder(), (work / "capture.json").read_text(), 0
    while index < len(text.rstrip()):
        document, index = decoder.raw_decode(text, index)
        captured.append(document)
        while index < len(text) and text[index].isspace():
            index += 1
    names = {d["name"]: d for d in captured if "name" in d and "context" in d}
    assert set(names) == {"megatron.layer.forward", "megatron.layer.self_attention", "megatron.layer.mlp"}
    forward = names["megatron.layer.forward"]["context"]["span_id"]
    assert names["megatron.layer.mlp"]["parent_id"] == forward
    assert names["megatron.layer.forward"]["resource"]["attributes"]["service.name"] == "megatron-lm"


def test_verify_rejects_a_capture_from_another_group_set(work: Path) -> None:
    """The same capture checked for the whole `layer` group: the Mamba span is missing (exit 1)."""
    if not (work / "capture.json").is_file():
        run_block("console", work, env=_clean_env(), timeout=400)
    result = subprocess.run(
        [
            "megatron-otel-codegen/.venv/bin/codegen",
            "verify",
            "megatron-otel-codegen/specs/",
            "capture.json",
            "--groups",
            "layer",
        ],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "megatron.layer.mamba" in result.stdout + result.stderr


def test_flags_block_turns_telemetry_on_with_the_flags_over_the_environment(work: Path) -> None:
    export, launch = [line for line in blocks()["flags"].splitlines() if line.strip()]
    env = _clean_env()
    words = shlex.split(export)
    assert words[0] == "export"
    env.update(word.split("=", 1) for word in words[1:])
    argv = shlex.split(launch)
    assert argv[:3] == ["python", "pretrain_gpt.py", "$MEGATRON_ARGS"]
    env.update(PYTHONPATH=str(work / "megatron-otel"), MEGATRON_OTEL_EXPORTER="none")
    out = parse_flags(argv[3:], env)
    # the flag's default,layer wins over the environment's default
    assert out["groups"] == ["checkpoint", "evaluate", "first_iteration", "inference", "job", "layer"]
    assert out["service_name"] == "gpt-8b"


def _exporter_installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is not None
    except ModuleNotFoundError:  # no opentelemetry.exporter namespace at all
        return False


def test_otlp_block_exports_or_says_why_not_and_never_fails_the_run(work: Path) -> None:
    """The OTLP block's variables, then the example: with the exporter (tox -e runtime installs it)
    the unreachable endpoint costs bounded time and the run still succeeds; without it the run
    logs, once per signal, that nothing is exported."""
    script = (
        blocks()["otlp"]
        + f"MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=layer PYTHONPATH=$PWD/megatron-otel python {EXAMPLE}\n"
    )
    result = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=work,
        env={**_clean_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == ""  # nothing printed: the spans went over OTLP or nowhere
    missing = "no OTLP exporter installed (opentelemetry-exporter-otlp): {}s are not exported"
    for signal in ("trace", "metric"):
        assert (missing.format(signal) in result.stderr) is not _exporter_installed(), result.stderr[-3000:]
