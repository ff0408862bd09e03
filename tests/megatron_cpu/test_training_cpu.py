"""megatron/training's instrumented ``evaluate()`` and ``train_step()``, run on CPU.

The instrumented fork's ``megatron.training.training.evaluate`` (``@otel.traced("megatron.evaluate")``,
a flat ``megatron.evaluate.step`` around ``forward_backward_func``, a hook stamping
``megatron.eval_iters``) and ``train_step`` (``megatron.train.iteration.forward_backward`` and
``megatron.train.iteration.optimizer``) run on the tiny GPT of ``megatron_cpu_worker.py`` with
megatron's global state set up from ``parse_args``, megatron's DDP wrapper and
``get_megatron_optimizer``. See ``megatron_training_worker.py`` for what a CPU build of torch
needs there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

for _module in ("torch", "triton", "numpy", "opentelemetry.sdk.trace"):
    pytest.importorskip(_module, reason=f"{_module} is needed to run megatron/training on CPU")

import torch

from codegen.cli import main
from tests.support.megatron_workers import worker_env
from tests.support.otlp_json import console_capture, named
from tests.support.ports import free_port

WORKER = Path(__file__).resolve().parent / "megatron_training_worker.py"
SPECS = Path(__file__).resolve().parents[2] / "specs"
RUNS = ("off", "all", "default", "job")
EVAL_ITERS = 3  # the worker's --eval-iters
TRAIN_STEPS = 2
NUM_MICROBATCHES = 2  # per evaluate step and per train_step (global batch 4, micro batch 2)
NUM_LAYERS = 2


@pytest.fixture(scope="module")
def training_results(fork_root: Path, tmp_path_factory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("training")
    out = work / "training.pt"
    args = ["--out", str(out), "--runs", ",".join(RUNS), "--port", str(free_port())]
    result = subprocess.run(
        [sys.executable, str(WORKER), *args],
        check=False,
        cwd=work,
        env=worker_env(fork_root),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"megatron training worker failed:\n{result.stdout[-4000:]}"
    return torch.load(out, weights_only=False)


def _children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    return [span for span in spans if span["parent_id"] == parent["span_id"]]


def test_the_fork_training_module_ran(training_results, fork_root):
    assert training_results["megatron_file"].startswith(str(fork_root))
    assert (fork_root / "megatron/core/otel/__init__.py").is_file()


# --------------------------------------------------------------------------------------------
# evaluate(): taxonomy rows 54-55


@pytest.fixture(scope="module")
def eval_spans(training_results) -> list[dict[str, Any]]:
    run = training_results["evaluate"]["all"]
    assert "evaluate" in run["enabled_groups"]
    return run["spans"]


def test_evaluate_span_carries_eval_iters(eval_spans):
    (evaluate,) = named(eval_spans, "megatron.evaluate")
    assert evaluate["attributes"] == {
        "megatron.span_group": "evaluate",
        "megatron.eval_iters": EVAL_ITERS,
    }
    assert evaluate["parent_id"] is None  # called on its own here, not inside train()
    assert evaluate["status"] == "UNSET"


def test_evaluate_steps_are_children_numbered_from_one(eval_spans):
    (evaluate,) = named(eval_spans, "megatron.evaluate")
    steps = named(eval_spans, "megatron.evaluate.step")
    assert [s["attributes"] for s in steps] == [
        {"megatron.span_group": "evaluate", "megatron.eval_iteration": i} for i in range(1, EVAL_ITERS + 1)
    ]
    assert all(step["parent_id"] == evaluate["span_id"] for step in steps)
    assert all(step["status"] == "UNSET" for step in steps)
    assert _children(eval_spans, evaluate) == steps


def test_eval_microbatch_forward_is_under_evaluate_step(eval_spans):
    by_id = {span["span_id"]: span for span in eval_spans}
    forwards = named(eval_spans, "megatron.microbatch.forward")
    assert len(forwards) == EVAL_ITERS * NUM_MICROBATCHES
    for forward in forwards:
        assert by_id[forward["parent_id"]]["name"] == "megatron.evaluate.step"
    for step in named(eval_spans, "megatron.evaluate.step"):
        children = _children(eval_spans, step)
        assert [c["name"] for c in children] == ["megatron.microbatch.forward"] * NUM_MICROBATCHES
    assert not named(eval_spans, "megatron.microbatch.backward")  # forward_only=True
    for layer in named(eval_spans, "megatron.layer.forward"):
        assert by_id[layer["parent_id"]]["name"] == "megatron.microbatch.forward"


def test_default_preset_records_evaluate_without_the_hot_paths(training_results):
    run = training_results["evaluate"]["default"]
    assert "evaluate" in run["enabled_groups"] and "microbatch" not in run["enabled_groups"]
    names = [span["name"] for span in run["spans"]]
    assert names == ["megatron.evaluate.step"] * EVAL_ITERS + ["megatron.evaluate"]
    assert run["spans"][-1]["attributes"]["megatron.eval_iters"] == EVAL_ITERS


@pytest.mark.parametrize("run", ["off", "job"])
def test_no_evaluate_spans_without_the_group(training_results, run):
    result = training_results["evaluate"][run]
    assert "evaluate" not in result["enabled_groups"]
    assert result["spans"] == []


# --------------------------------------------------------------------------------------------
# train_step(): taxonomy rows 32-33


@pytest.fixture(scope="module")
def train_spans(training_results) -> list[dict[str, Any]]:
    run = training_results["train_step"]["all"]
    assert {"forward_backward", "optimizer"} <= set(run["enabled_groups"])
    return run["spans"]


def test_train_step_emits_forward_backward_then_optimizer(train_spans):
    top = [s for s in train_spans if s["name"].startswith("megatron.train.")]
    assert [s["name"] for s in top] == [
        "megatron.train.iteration.forward_backward",
        "megatron.train.iteration.optimizer",
    ] * TRAIN_STEPS
    for span in named(train_spans, "megatron.train.iteration.forward_backward"):
        assert span["attributes"] == {
            "megatron.span_group": "forward_backward",
            "num_microbatches": NUM_MICROBATCHES,
        }
    for span in named(train_spans, "megatron.train.iteration.optimizer"):
        assert span["attributes"] == {
            "megatron.span_group": "optimizer",
            "megatron.update_successful": True,
        }
        assert _children(train_spans, span) == []
    for span in top:
        assert span["parent_id"] is None  # no train() around train_step here
        assert span["status"] == "UNSET"


def test_train_microbatches_are_under_forward_backward(train_spans):
    for forward_backward in named(train_spans, "megatron.train.iteration.forward_backward"):
        children = sorted(c["name"] for c in _children(train_spans, forward_backward))
        assert children == sorted(
            ["megatron.microbatch.forward", "megatron.microbatch.backward"] * NUM_MICROBATCHES
        )
    by_id = {span["span_id"]: span for span in train_spans}
    for layer in named(train_spans, "megatron.layer.forward"):
        assert by_id[layer["parent_id"]]["name"] == "megatron.microbatch.forward"
    assert len(named(train_spans, "megatron.layer.forward")) == TRAIN_STEPS * NUM_MICROBATCHES * NUM_LAYERS


@pytest.mark.parametrize("run", ["off", "default", "job"])
def test_no_train_step_spans_without_their_groups(training_results, run):
    result = training_results["train_step"][run]
    assert not {"forward_backward", "optimizer"} & set(result["enabled_groups"])
    assert result["spans"] == []


def test_train_step_ran_megatrons_optimizer(training_results):
    run = training_results["train_step"]["off"]
    # without transformer-engine or apex, megatron's Adam is torch.optim.AdamW
    assert run["optimizer"] == "ChainedOptimizer" and run["inner_optimizers"] == ["AdamW"]
    assert len(run["steps"]) == TRAIN_STEPS
    for step in run["steps"]:
        assert step["skipped"] == 0 and not step["should_exit"]
        assert torch.isfinite(step["loss"]["lm loss"]) and step["loss"]["lm loss"] > 0
        assert step["grad_norm"] > 0


# --------------------------------------------------------------------------------------------
# telemetry never changes results


@pytest.mark.parametrize("run", ["all", "default", "job"])
def test_results_identical_with_and_without_telemetry(training_results, run):
    off_eval, on_eval = (
        training_results["evaluate"]["off"],
        training_results["evaluate"][run],
    )
    assert torch.equal(on_eval["loss"]["lm loss"], off_eval["loss"]["lm loss"])
    assert on_eval["timelimit"] is False and off_eval["timelimit"] is False
    off_train, on_train = (
        training_results["train_step"]["off"],
        training_results["train_step"][run],
    )
    for expected, actual in zip(off_train["steps"], on_train["steps"], strict=True):
        assert torch.equal(actual["loss"]["lm loss"], expected["loss"]["lm loss"])
        assert actual["grad_norm"] == expected["grad_norm"]
    assert list(on_train["params"]) == list(off_train["params"])
    for name, param in off_train["params"].items():
        assert torch.equal(on_train["params"][name], param), name


# --------------------------------------------------------------------------------------------
# codegen verify against the taxonomy generated from specs/


def test_codegen_verify_accepts_the_training_run(training_results, tmp_path, capsys):
    spans = training_results["evaluate"]["all"]["spans"] + training_results["train_step"]["all"]["spans"]
    capture = tmp_path / "capture.json"
    capture.write_text(console_capture(spans))
    assert main(["verify", str(SPECS), str(capture), "--groups", ""]) == 0, capsys.readouterr().out
    assert f"{len(spans)} spans, 9 distinct names checked: 0 findings" in capsys.readouterr().out
    # every span the evaluate, forward_backward, optimizer and microbatch groups declare was seen
    groups = "evaluate,forward_backward,optimizer,microbatch"
    assert main(["verify", str(SPECS), str(capture), "--groups", groups]) == 0, capsys.readouterr().out
