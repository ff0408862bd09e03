"""The instrumented megatron-core, run on CPU: the spans it emits, and that it computes the same.

A tiny GPTModel (local layer spec, 2 layers, hidden 64, 4 heads, vocab 128, seq 16, fp32, CPU
initialization) runs two microbatches of forward + backward through
``schedules.forward_backward_no_pipelining``; a MambaLayer with a CPU stand-in mixer runs forward
+ backward; two gloo ranks exchange tensors through ``P2PCommunicator``. See
``megatron_cpu_worker.py`` for what had to be adapted to run on a CPU build of torch.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.otlp_json import console_capture, named

for _module in ("torch", "triton", "numpy", "opentelemetry.sdk.trace"):
    pytest.importorskip(_module, reason=f"{_module} is needed to run megatron-core on CPU")

import torch

from codegen.cli import main

LAYER_SPANS = {"megatron.layer.forward", "megatron.layer.self_attention", "megatron.layer.mlp"}
MICROBATCH_SPANS = {"megatron.microbatch.forward", "megatron.microbatch.backward"}
P2P_SPANS = {
    "megatron.p2p.recv_forward",
    "megatron.p2p.recv_backward",
    "megatron.p2p.send_forward",
    "megatron.p2p.send_backward",
}
GROUP_OF = {
    **{name: "layer" for name in LAYER_SPANS | {"megatron.layer.mamba"}},
    **{name: "microbatch" for name in MICROBATCH_SPANS},
    **{name: "communication" for name in P2P_SPANS},
}
NUM_LAYERS = 2
SPECS = Path(__file__).resolve().parents[2] / "specs"
NUM_MICROBATCHES = 2


def _by_id(spans: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {span["span_id"]: span for span in spans}


def _ancestors(span: dict[str, Any], by_id: dict[int, dict[str, Any]]) -> list[str]:
    names = []
    parent = span["parent_id"]
    while parent is not None and parent in by_id:
        names.append(by_id[parent]["name"])
        parent = by_id[parent]["parent_id"]
    return names


def _assert_same_tensors(
    expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor], what: str
) -> None:
    assert list(actual) == list(expected), what
    for name, tensor in expected.items():
        assert tensor is not None, f"{what}: {name} got no gradient"
        assert torch.equal(actual[name], tensor), f"{what}: {name} differs"


# --------------------------------------------------------------------------------------------
# the runs happened where they should


def test_each_run_imported_its_own_tree(train_results, pristine_root, fork_root):
    assert train_results["pristine"]["megatron_file"].startswith(str(pristine_root))
    assert train_results["instrumented"]["megatron_file"].startswith(str(fork_root))
    assert (fork_root / "megatron/core/otel/__init__.py").is_file()
    assert not (pristine_root / "megatron/core/otel").exists()


def test_the_model_learns_something(train_results):
    plain = train_results["pristine"]["runs"]["plain"]
    assert len(plain["losses"]) == NUM_MICROBATCHES
    for loss in plain["losses"]:
        assert torch.isfinite(loss).all() and loss[0] > 0
    assert any(grad.abs().sum() > 0 for grad in plain["grads"].values())


# --------------------------------------------------------------------------------------------
# spans under enable("all")


@pytest.fixture(scope="module")
def all_spans(train_results) -> list[dict[str, Any]]:
    run = train_results["instrumented"]["runs"]["all"]
    assert "layer" in run["enabled_groups"] and "microbatch" in run["enabled_groups"]
    return run["spans"]


def test_enable_all_emits_microbatch_and_layer_spans(all_spans):
    names = [span["name"] for span in all_spans]
    for name in MICROBATCH_SPANS:
        assert names.count(name) == NUM_MICROBATCHES, name
    for name in LAYER_SPANS:
        assert names.count(name) == NUM_MICROBATCHES * NUM_LAYERS, name
    assert set(names) == MICROBATCH_SPANS | LAYER_SPANS


def test_every_span_carries_its_group(all_spans):
    for span in all_spans:
        assert span["attributes"]["megatron.span_group"] == GROUP_OF[span["name"]], span["name"]
        assert span["status"] == "UNSET", span["name"]


def test_layer_forward_records_layer_number(all_spans):
    numbers = sorted(
        span["attributes"]["megatron.layer_number"] for span in named(all_spans, "megatron.layer.forward")
    )
    assert numbers == sorted(list(range(1, NUM_LAYERS + 1)) * NUM_MICROBATCHES)


def test_attention_and_mlp_are_children_of_layer_forward(all_spans):
    by_id = _by_id(all_spans)
    for name in ("megatron.layer.self_attention", "megatron.layer.mlp"):
        for span in named(all_spans, name):
            parent = by_id[span["parent_id"]]
            assert parent["name"] == "megatron.layer.forward"
    # each layer.forward has exactly one of each
    for layer in named(all_spans, "megatron.layer.forward"):
        children = sorted(s["name"] for s in all_spans if s["parent_id"] == layer["span_id"])
        assert children == ["megatron.layer.mlp", "megatron.layer.self_attention"]


def test_layer_forward_is_under_microbatch_forward(all_spans):
    by_id = _by_id(all_spans)
    for span in named(all_spans, "megatron.layer.forward"):
        assert "megatron.microbatch.forward" in _ancestors(span, by_id)
    for microbatch in named(all_spans, "megatron.microbatch.forward"):
        layers = [
            s
            for s in named(all_spans, "megatron.layer.forward")
            if microbatch["span_id"] in _ids_above(s, by_id)
        ]
        assert len(layers) == NUM_LAYERS


def _ids_above(span: dict[str, Any], by_id: dict[int, dict[str, Any]]) -> set[int]:
    ids = set()
    parent = span["parent_id"]
    while parent is not None and parent in by_id:
        ids.add(parent)
        parent = by_id[parent]["parent_id"]
    return ids


def test_microbatch_spans_are_roots_here(all_spans):
    # Nothing above forward_step / backward_step is instrumented in megatron-core itself
    # (train_step lives in megatron/training), and backward runs after forward has ended.
    for span in all_spans:
        if span["name"] in MICROBATCH_SPANS:
            assert span["parent_id"] is None
    backward = named(all_spans, "megatron.microbatch.backward")
    assert all(not any(s["parent_id"] == b["span_id"] for s in all_spans) for b in backward)


def test_mamba_layer_spans(train_results):
    spans = train_results["instrumented"]["mamba"]["all"]["spans"]
    assert sorted(s["name"] for s in spans) == ["megatron.layer.forward", "megatron.layer.mamba"]
    (forward,) = named(spans, "megatron.layer.forward")
    (mamba,) = named(spans, "megatron.layer.mamba")
    assert mamba["parent_id"] == forward["span_id"]
    assert forward["attributes"] == {"megatron.span_group": "layer", "megatron.layer_number": 3}
    assert mamba["attributes"] == {"megatron.span_group": "layer"}


# --------------------------------------------------------------------------------------------
# nothing under the default preset, nothing when never enabled


@pytest.mark.parametrize("run", ["off", "default"])
def test_no_spans_when_groups_are_off(train_results, run):
    gpt = train_results["instrumented"]["runs"][run]
    mamba = train_results["instrumented"]["mamba"][run]
    assert "layer" not in gpt["enabled_groups"] and "microbatch" not in gpt["enabled_groups"]
    assert gpt["spans"] == []
    assert mamba["spans"] == []


# --------------------------------------------------------------------------------------------
# telemetry never changes results


@pytest.mark.parametrize("run", ["off", "all", "default"])
def test_gpt_bit_identical_to_pristine(train_results, run):
    pristine = train_results["pristine"]["runs"]["plain"]
    instrumented = train_results["instrumented"]["runs"][run]
    assert len(instrumented["losses"]) == len(pristine["losses"])
    for expected, actual in zip(pristine["losses"], instrumented["losses"]):
        assert torch.equal(actual, expected)
    _assert_same_tensors(pristine["grads"], instrumented["grads"], f"GPT gradients ({run})")


@pytest.mark.parametrize("run", ["off", "all", "default"])
def test_mamba_bit_identical_to_pristine(train_results, run):
    pristine = train_results["pristine"]["mamba"]["plain"]
    instrumented = train_results["instrumented"]["mamba"][run]
    assert torch.equal(instrumented["output"], pristine["output"])
    _assert_same_tensors(pristine["grads"], instrumented["grads"], f"Mamba gradients ({run})")


# --------------------------------------------------------------------------------------------
# pipeline-parallel P2P between two gloo ranks


def test_p2p_tensors_arrive(p2p_results):
    rank0, rank1 = p2p_results
    assert torch.equal(rank1["received"], rank0["sent"])  # send_forward, 0 -> 1
    assert torch.equal(rank0["received"], rank1["sent"])  # send_backward, 1 -> 0
    assert rank0["recv_forward"] is None and rank1["recv_backward"] is None


def test_p2p_spans(p2p_results):
    rank0, rank1 = p2p_results
    assert [s["name"] for s in rank0["spans"]] == ["megatron.p2p.recv_forward", "megatron.p2p.send_forward"]
    assert sorted(s["name"] for s in rank1["spans"]) == sorted(
        ["megatron.p2p.recv_forward", "megatron.p2p.send_backward", "megatron.p2p.recv_backward"]
    )
    for span in rank0["spans"] + rank1["spans"]:
        assert span["attributes"] == {"megatron.span_group": "communication"}
        assert span["parent_id"] is None


def test_p2p_receive_needs_cuda_and_the_span_records_the_error(p2p_results):
    rank1 = p2p_results[1]
    if rank1["cuda_available"]:
        pytest.skip("megatron's P2P receive runs where CUDA is available")
    assert rank1["recv_forward_error"] == "AssertionError: Torch not compiled with CUDA enabled"
    (failed,) = named(rank1["spans"], "megatron.p2p.recv_forward")
    assert failed["status"] == "ERROR"
    assert failed["events"] == ["exception"]
    for span in rank1["spans"]:
        if span is not failed:
            assert span["status"] == "UNSET"


# --------------------------------------------------------------------------------------------
# what the run emitted, checked by `codegen verify` against the taxonomy generated from specs/


def test_codegen_verify_accepts_the_cpu_run(train_results, p2p_results, tmp_path, capsys):
    spans = list(train_results["instrumented"]["runs"]["all"]["spans"])
    spans += train_results["instrumented"]["mamba"]["all"]["spans"]
    capture = tmp_path / "capture.json"
    capture.write_text(console_capture(spans))
    assert main(["verify", str(SPECS), str(capture), "--groups", "layer,microbatch"]) == 0, (
        capsys.readouterr().out
    )
    out = capsys.readouterr().out
    assert f"{len(spans)} spans, 6 distinct names checked: 0 findings" in out

    # Both pipeline ranks; grad_sync needs DDP on CUDA, so no group must be complete here.
    capture.write_text(console_capture(p2p_results[0]["spans"] + p2p_results[1]["spans"]))
    assert main(["verify", str(SPECS), str(capture), "--groups", ""]) == 0, capsys.readouterr().out


def test_codegen_verify_rejects_a_span_moved_to_another_group(train_results, tmp_path, capsys):
    specs = tmp_path / "specs"
    shutil.copytree(SPECS, specs)
    layers = specs / "layers.yaml"
    layers.write_text(
        layers.read_text().replace(
            "name: megatron.layer.mlp\n    group: layer", "name: megatron.layer.mlp\n    group: microbatch"
        )
    )
    capture = tmp_path / "capture.json"
    capture.write_text(console_capture(train_results["instrumented"]["runs"]["all"]["spans"]))
    assert main(["verify", str(specs), str(capture)]) == 1
    assert "span 'megatron.layer.mlp' has group 'layer'; the docs say 'microbatch'" in capsys.readouterr().out
