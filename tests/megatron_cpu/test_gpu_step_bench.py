"""The GPU step benchmark (``benchmarks/gpu_step.py``) run on CPU: its arms, launch commands,
Megatron log parsing and table, with the tests' pretrain worker on a tiny GPT instead of
``torchrun pretrain_gpt.py`` on a ~1.3B one (the GPU run needs a GPU: benchmarks/README.md)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.http.trace_exporter", reason="the OTLP/HTTP exporter is needed"
)
if shutil.which("opentelemetry-instrument", path=str(Path(sys.executable).parent)) is None:
    pytest.skip("opentelemetry-instrument (opentelemetry-instrumentation) is needed", allow_module_level=True)

from benchmarks import engine_step, gpu_step

ITERS = 5
WARMUP = 2
SERVING_STEPS = 40


def test_commands_put_the_sdk_arm_under_opentelemetry_instrument() -> None:
    launch = ["python", "-m", "torch.distributed.run", "--nproc-per-node", "1", "pretrain_gpt.py", "--bf16"]
    assert gpu_step.arm_command("off", launch, "OI") == launch
    assert gpu_step.arm_command("all_lean", launch, "OI") == [
        *launch,
        "--otel-enabled",
        "--otel-span-groups",
        "all",
    ]
    assert gpu_step.arm_command("all_sdk", launch, "OI") == [
        "OI",
        *launch,
        "--otel-enabled",
        "--otel-span-groups",
        "all",
    ]
    receiver = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
    assert "MEGATRON_OTEL_EXPORTER" not in gpu_step.arm_environment("all_sdk", receiver)
    assert gpu_step.arm_environment("all_sdk", receiver)["OTEL_TRACES_EXPORTER"] == "otlp"
    assert gpu_step.arm_environment("all_lean", receiver)["MEGATRON_OTEL_EXPORTER"] == "otlp"
    assert gpu_step.arm_environment("off", receiver) == {}


def test_the_benchmark_runs_every_arm_and_reads_megatrons_own_iteration_times(
    fork_root: Path, dataset_helpers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "work"
    code = gpu_step.main(
        ["--cpu-worker", str(dataset_helpers), "--fork", str(fork_root), "--iters", str(ITERS),
         "--warmup", str(WARMUP), "--out", str(out), "--json", str(tmp_path / "rows.json"),
         "--serving-steps", str(SERVING_STEPS)]
    )  # fmt: skip
    assert code == 0
    rows = {row["arm"]: row for row in json.loads((tmp_path / "rows.json").read_text())}
    assert list(rows) == list(gpu_step.ARMS)
    for arm, row in rows.items():
        # every iteration's line came from Megatron's training_log, parsed from the run's output
        assert row["iterations_logged"] == ITERS, arm
        assert row["median_ms"] > 0
    assert rows["off"]["ratio"] == 1.0
    assert rows["off"]["spans_per_iteration"] == 0
    # default records no per-step span; all records the step, layer and microbatch spans, and
    # both paths record the same taxonomy
    assert 0 < rows["default"]["spans_per_iteration"] < rows["all_lean"]["spans_per_iteration"]
    assert rows["all_sdk"]["spans_per_iteration"] == rows["all_lean"]["spans_per_iteration"]
    printed = capsys.readouterr().out
    assert "| all_lean |" in printed and "median after 2 warm-up iterations of 5" in printed
    iteration_ms = gpu_step.parse_iteration_ms((out / "off" / "off.log").read_text())
    assert sorted(iteration_ms) == list(range(1, ITERS + 1))
    # the serving step arm, on the same fork: the engine's own step code, a span per step with all
    serving = {row["arm"]: row for row in json.loads((tmp_path / "rows-serving.json").read_text())}
    assert list(serving) == list(engine_step.ARMS)
    assert all(row["steps"] == SERVING_STEPS and row["median_us"] > 0 for row in serving.values())
    assert [serving[arm]["spans_per_step"] for arm in engine_step.ARMS] == [0, 0, 1]
    assert "| all |" in printed.split("dynamic engine step (async_step)")[1]


def test_the_serving_arm_steps_the_forks_engine_code(fork_root: Path, tmp_path: Path) -> None:
    """One arm's worker: the fork's DynamicInferenceEngine module, its async_step run as many times
    as asked (the context's step count, which async_forward increments), the step's span exported
    with the batch's attributes (the stand-in context's: 120 prefill tokens, 8 decode)."""
    result = engine_step.run_arm("all", fork_root, 3, "cpu", tmp_path, timeout=300)
    assert result["engine_file"] == str(fork_root / "megatron/core/inference/engines/dynamic_engine.py")
    assert result["steps"] == 3 and len(result["step_us"]) == 3
    assert result["spans"] == 3
    exported = (tmp_path / "all.out").read_text()
    assert exported.count('"megatron.inference.prefill_tokens": 120') == 3
    assert exported.count('"megatron.inference.decode_tokens": 8') == 3
