"""megatron.training's own ``pretrain()``, end to end on CPU, under the instrumented fork.

Every configuration of ``pretrain_harness.CONFIGS`` runs once per session (tiny GPT, mock data,
gloo; see ``megatron_pretrain_worker.py`` for what CPU needs). The export rank's spans and metrics
are captured in the OTLP JSON file format. Checked here: ``codegen verify`` on each capture; the
span names each configuration emits; the lifecycle (one startup span with its backdated phases,
``megatron.train`` re-rooted at every save_interval boundary, fresh and resumed, iterations and
checkpoints under the right interval, nothing open at exit); the metrics and their units; and
that losses, grad norms and checkpoint tensors are bit-identical with telemetry off, ``default``,
``all`` and on the pristine release.

The SIGTERM tests check the runtime fixes of issue 10, item 4 (they were strict xfails before).
"""

from __future__ import annotations

import collections
import itertools
from pathlib import Path
from typing import Any

import pytest

for _module in ("torch", "triton", "numpy", "opentelemetry.sdk.trace", "pybind11", "psutil"):
    pytest.importorskip(_module, reason=f"{_module} is needed to run megatron.training on CPU")

import torch

from codegen.capture import read_metrics
from codegen.capture import read_spans as read_capture
from codegen.cli import main
from codegen.pipeline import plan_only
from codegen.verify import expectations, verify
from tests.megatron_cpu.pretrain_harness import (
    CONFIGS,
    KILL_AT,
    NUM_LAYERS,
    OBSERVED,
    PHASES,
    RESUME_ITERS,
    SAVE_INTERVAL,
    SETUP,
    SIGTERM_AT,
    TRAIN_ITERS,
    checkpoint_tensors,
)
from tests.support.otlp_json import named

SPECS = Path(__file__).resolve().parents[2] / "specs"
TELEMETRY_RUNS = [name for name, config in CONFIGS.items() if config.telemetry not in ("plain", "off")]
# the same run: plain, off, default, all (a program's provider: the SDK path), all (the lean path)
IDENTICAL_RUNS = ("pristine", "off", "default", "fresh", "fresh_lean")


# Taxonomy spans no CPU run can reach, each with the call that blocks it.
UNREACHABLE_ON_CPU = {
    "megatron.activation.offload": "fine-grained activation offloading moves activations with CUDA "
    "streams and pinned host buffers (ChunkOffloadHandler); tests/gpu/ runs it",
    "megatron.activation.reload": "the same (ChunkOffloadHandler.reload); tests/gpu/ runs it",
    "megatron.layer.mamba": "MambaLayer's MambaMixer needs mamba_ssm's CUDA/Triton kernels; "
    "test_megatron_cpu.py runs MambaLayer with a CPU mixer instead",
    "megatron.startup.sniff_test": "--gpu-sniff-test-interval: gpu_sniff_test.bench_gemms times "
    "GPU-sized GEMMs with torch.cuda.Event.elapsed_time (gpu_sniff_test.py:67, _time_cuda_op)",
    "megatron.train.sniff_test": "the same sniff test, every --gpu-sniff-test-interval iterations",
    "megatron.train.cuda_graph_capture": "--cuda-graph-impl transformer_engine: TECudaGraphHelper "
    "captures CUDA graphs with transformer_engine",
    "megatron.train.forward_pre_hook": "needs --overlap-param-gather, which needs "
    "--use-distributed-optimizer: DistributedOptimizer._build_model_and_main_param_groups "
    "(core/optimizer/distrib_optimizer.py:477) raises TypeError for parameters that are not "
    "torch.cuda.FloatTensor/HalfTensor/BFloat16Tensor",
    "megatron.checkpoint.gc_collect": "runs under `if args.fp8:` in save_checkpoint_and_time; "
    "--fp8-format needs transformer_engine and an FP8-capable GPU",
}


def _run(pretrain_runs, name: str):
    run = pretrain_runs[name]
    run.check()
    return run


@pytest.fixture(scope="module")
def project_and_plan():
    return plan_only(SPECS, None)


@pytest.fixture(scope="module")
def taxonomy(project_and_plan) -> set[str]:
    return set(expectations(*project_and_plan))


def _verify(project_and_plan, capture: Path, groups: frozenset[str]):
    """What ``codegen verify SPECS CAPTURE --groups ...`` reports (its code, the plan built once)."""
    return verify(*project_and_plan, read_capture(capture), groups, read_metrics(capture))


# --------------------------------------------------------------------------------------------
# the runs happened, in the right tree


@pytest.mark.parametrize("name", list(CONFIGS))
def test_run_exits_as_configured(pretrain_runs, name, pristine_root, fork_root):
    run = _run(pretrain_runs, name)
    root = pristine_root if run.config.tree == "pristine" else fork_root
    for result in run.results:
        if result:  # a killed process writes none
            assert result["megatron_file"].startswith(str(root))


@pytest.mark.parametrize("name", ["fresh", "fresh_lean", "off", "default", "pristine", "resume", "pp", "dp"])
def test_pretrain_returns_after_training(pretrain_runs, name):
    run = _run(pretrain_runs, name)
    last = int(run.config.argv[run.config.argv.index("--train-iters") + 1])
    first = TRAIN_ITERS + 1 if name == "resume" else 1
    for result in run.results:
        assert result["finished"] is True
        assert [i["iteration"] for i in result["iterations"]] == list(range(first, last + 1))


# --------------------------------------------------------------------------------------------
# every span accounted for


def test_codegen_verify_cli_passes_on_the_proof_capture(pretrain_runs, capsys):
    run = _run(pretrain_runs, "fresh")
    assert main(["verify", str(SPECS), str(run.capture), "--groups", ""]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert ", 6 metric names checked: 0 findings" in out


@pytest.mark.parametrize("name", TELEMETRY_RUNS)
def test_codegen_verify_passes_on_each_capture(pretrain_runs, project_and_plan, name):
    """No unknown names, every span with its documented group, parent and attributes, every
    metric declared, with its unit and kind."""
    run = _run(pretrain_runs, name)
    report = _verify(project_and_plan, run.capture, frozenset())
    assert report.clean, report.render()
    assert report.spans > 0 and report.metrics


@pytest.mark.parametrize("name", TELEMETRY_RUNS)
def test_observed_span_names_per_configuration(pretrain_runs, name):
    run = _run(pretrain_runs, name)
    assert {span["name"] for span in run.spans()} == OBSERVED[name]


SERVING_GROUPS = frozenset({"inference", "inference_steps"})


def _served(project_and_plan) -> set[str]:
    """The inference server's spans: no part of pretrain(); test_serving.py runs them."""
    project, _ = project_and_plan
    return {span.name for span in project.spans if span.group in SERVING_GROUPS}


def test_every_taxonomy_span_is_observed_or_unreachable_on_cpu(taxonomy, project_and_plan):
    observed = set().union(*OBSERVED.values())
    served = _served(project_and_plan)
    assert served and not served & observed
    assert observed <= taxonomy
    assert taxonomy - observed - served == set(UNREACHABLE_ON_CPU)


def test_verify_finds_only_the_unreachable_spans_missing(pretrain_runs, project_and_plan):
    """The proof runs' captures, checked for completeness over every group."""
    project, _ = project_and_plan
    every_group = frozenset(group.name for group in project.groups)
    # span ids restart from megatron's seed in every process: check each capture on its own and
    # intersect what each misses
    missing = []
    for name in TELEMETRY_RUNS:
        if CONFIGS[name].telemetry != "all":
            continue
        report = _verify(project_and_plan, _run(pretrain_runs, name).capture, every_group)
        assert all(f.endswith("was never seen") for f in report.findings), report.render()
        missing.append({f.split("'")[1] for f in report.findings})
    assert set.intersection(*missing) == set(UNREACHABLE_ON_CPU) | _served(project_and_plan)


def test_the_lean_path_records_the_same_spans_as_the_sdk_path(pretrain_runs, project_and_plan):
    """``fresh`` records through a program's provider (the SDK path), ``fresh_lean`` through the
    runtime's own (the lean path): the same spans with the same parents, attributes and status,
    and the same verify report."""

    def shape(spans: list[dict[str, Any]]) -> list[tuple]:
        by_id = {span["span_id"]: span for span in spans}
        out = []
        for span in spans:
            parent = by_id.get(span["parent_id"]) if span["parent_id"] else None
            attributes = {k: v for k, v in span["attributes"].items() if "path" not in k and "dir" not in k}
            out.append((span["name"], parent["name"] if parent else None, sorted(attributes.items(), key=str),
                        span["status"], sorted(by_id[link]["name"] for link in span["links"] if link in by_id)))  # fmt: skip
        return sorted(out, key=str)

    sdk, lean = (_run(pretrain_runs, name) for name in ("fresh", "fresh_lean"))
    assert shape(lean.spans()) == shape(sdk.spans())
    reports = [_verify(project_and_plan, run.capture, frozenset()) for run in (sdk, lean)]
    assert reports[0].render().replace(str(sdk.capture), "") == reports[1].render().replace(
        str(lean.capture), ""
    )


# --------------------------------------------------------------------------------------------
# the lifecycle, from the capture


def test_one_startup_span_with_its_backdated_phases(pretrain_runs):
    run = _run(pretrain_runs, "fresh")
    spans = run.spans()
    (startup,) = named(spans, "megatron.startup")
    (pre_startup,) = named(spans, "pre_startup")
    assert startup["parent_id"] is None and pre_startup["parent_id"] is None
    assert startup["trace_id"] != pre_startup["trace_id"]
    phases = [named(spans, name) for name in PHASES]
    assert all(len(found) == 1 for found in phases), [len(f) for f in phases]
    phases = [found[0] for found in phases]
    assert all(phase["parent_id"] == startup["span_id"] for phase in phases)
    # contiguous: each phase starts where the previous one ended
    for before, after in itertools.pairwise(phases):
        assert before["end"] == after["start"], (before["name"], after["name"])
        assert before["start"] <= before["end"]
    ns = {key: round(value * 1e9) for key, value in run.launch.items()}
    assert abs(pre_startup["start"] - ns["MEGATRON_OTEL_JOB_START_TIME"]) < 1000
    assert abs(pre_startup["end"] - ns["MEGATRON_OTEL_LAUNCH_SCRIPT_START_TIME"]) < 1000
    assert pre_startup["end"] == phases[0]["start"]
    assert abs(phases[1]["start"] - ns["MEGATRON_OTEL_PRE_SRUN_TIME"]) < 1000
    # backdated to program start (the imports phase), closed before the training loop
    assert startup["start"] == phases[2]["start"]
    assert startup["end"] >= max(p["end"] for p in phases)
    intervals = sorted(named(spans, "megatron.train"), key=lambda s: s["start"])
    assert startup["end"] <= intervals[0]["start"]
    for name in SETUP | {"megatron.startup.weight_hash_check"}:
        (span,) = named(spans, name)
        assert span["parent_id"] == startup["span_id"]
        assert startup["start"] <= span["start"] <= span["end"] <= startup["end"]
    assert startup["attributes"]["megatron.model_type"] == "ModelType.encoder_or_decoder"


def _intervals(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(named(spans, "megatron.train"), key=lambda s: s["start"])


def _check_intervals(spans, first_iteration: int, last_iteration: int) -> None:
    intervals = _intervals(spans)
    starts = list(range(first_iteration, last_iteration, SAVE_INTERVAL))
    assert [i["attributes"]["megatron.iteration"] for i in intervals] == starts
    assert [i["attributes"]["megatron.trace_interval"] for i in intervals] == [
        s // SAVE_INTERVAL for s in starts
    ]
    # each interval a root of its own trace, linked to the one before (the first to startup)
    (startup,) = named(spans, "megatron.startup")
    previous = startup
    for interval in intervals:
        assert interval["parent_id"] is None
        assert interval["trace_id"] != previous["trace_id"]
        assert interval["links"] == [previous["span_id"]]
        previous = interval
    for before, after in itertools.pairwise(intervals):
        assert before["end"] <= after["start"]
    # every iteration under the interval of its save_interval window
    by_start = {i["attributes"]["megatron.iteration"]: i for i in intervals}
    iterations = named(spans, "megatron.train.iteration")
    assert sorted(s["attributes"]["megatron.iteration"] for s in iterations) == list(
        range(first_iteration, last_iteration)
    )
    for span in iterations:
        number = span["attributes"]["megatron.iteration"]
        interval = by_start[number - number % SAVE_INTERVAL]
        assert span["parent_id"] == interval["span_id"], number
        assert interval["start"] <= span["start"] <= span["end"] <= interval["end"]
    # a checkpoint saved at iteration k closes the window that ends there
    for save in named(spans, "megatron.checkpoint.exposed_save"):
        number = save["attributes"]["megatron.iteration"]
        assert save["parent_id"] == by_start[number - SAVE_INTERVAL]["span_id"], number


def test_train_intervals_reroot_at_save_interval_fresh(pretrain_runs):
    spans = _run(pretrain_runs, "fresh").spans()
    _check_intervals(spans, 0, TRAIN_ITERS)
    saves = sorted(
        s["attributes"]["megatron.iteration"] for s in named(spans, "megatron.checkpoint.exposed_save")
    )
    assert saves == list(range(SAVE_INTERVAL, TRAIN_ITERS + 1, SAVE_INTERVAL))


def test_train_intervals_reroot_at_save_interval_resumed(pretrain_runs):
    spans = _run(pretrain_runs, "resume").spans()
    _check_intervals(spans, TRAIN_ITERS, RESUME_ITERS)
    # the checkpoint load ran during model setup, inside the startup trace
    (model_init,) = named(spans, "megatron.startup.model_init")
    (load,) = named(spans, "megatron.checkpoint.load")
    (io_read,) = named(spans, "megatron.checkpoint.load.io_read")
    assert load["parent_id"] == model_init["span_id"] and io_read["parent_id"] == load["span_id"]


def test_first_iteration_only_once_and_around_the_first_step(pretrain_runs):
    spans = _run(pretrain_runs, "fresh").spans()
    (first,) = named(spans, "megatron.train.first_iteration")
    (iteration,) = named(spans, "megatron.train.iteration", iteration=0)
    assert first["parent_id"] == iteration["span_id"]
    steps = [s for s in spans if s["name"].startswith("megatron.train.iteration.")]
    assert sum(s["parent_id"] == first["span_id"] for s in steps) == 2  # forward_backward, optimizer


# Backdated phases before program start, where megatron.startup itself begins (by design: the
# startup span measures the program; the launcher's phases are attached to it).
BEFORE_PROGRAM_START = {"megatron.startup.launch_script", "megatron.startup.container_load"}


def _nesting_violations(spans: list[dict[str, Any]]) -> list[str]:
    by_id = {span["span_id"]: span for span in spans}
    bad = []
    for span in spans:
        parent = by_id.get(span["parent_id"])
        if parent is None:
            continue
        if span["name"] in BEFORE_PROGRAM_START:
            inside = span["start"] <= span["end"] <= parent["start"]
        else:
            inside = parent["start"] <= span["start"] <= span["end"] <= parent["end"]
        if not inside:
            bad.append(
                f"{span['name']} ({span['attributes'].get('megatron.iteration')}) outside {parent['name']}"
            )
    return bad


@pytest.mark.parametrize("name", ["fresh", "resume", "default", "pp", "pp_first", "dp"])
def test_nothing_open_at_exit_and_every_span_inside_its_parent(pretrain_runs, name):
    run = _run(pretrain_runs, name)
    export_rank = 0 if name == "pp_first" else run.config.ranks - 1
    assert run.results[export_rank]["open_spans"] == []
    spans = run.spans()
    assert _nesting_violations(spans) == []
    ids = [span["span_id"] for span in spans]
    assert len(ids) == len(set(ids))  # nothing exported twice


# --------------------------------------------------------------------------------------------
# metrics


DECLARED_UNITS = {
    "megatron.training.step_duration_ms": ("ms", "histogram"),
    "megatron.training.loss": ("1", "gauge"),
    "megatron.training.throughput_tflops": ("TFLOP/s", "gauge"),
    "megatron.training.tokens_per_sec": ("tokens/s", "gauge"),
    "megatron.training.grad_norm": ("1", "gauge"),
    "megatron.training.learning_rate": ("1", "gauge"),
}


def test_metrics_recorded_with_their_units(pretrain_runs):
    run = _run(pretrain_runs, "fresh")
    metrics = run.metrics()
    # not recorded here: skipped_iters (added only when > 0), memory_allocated_gb (no CUDA)
    assert {name: (m.unit, m.kind) for name, m in metrics.items()} == DECLARED_UNITS
    last = run.results[0]["iterations"][-1]
    (loss,) = metrics["megatron.training.loss"].data_points
    assert loss.value == pytest.approx(last["lm_loss"], rel=1e-6)
    (grad_norm,) = metrics["megatron.training.grad_norm"].data_points
    assert grad_norm.value == pytest.approx(last["grad_norm"], rel=1e-6)
    (durations,) = metrics["megatron.training.step_duration_ms"].data_points
    assert durations.count == TRAIN_ITERS  # --log-interval 1: every iteration
    assert durations.explicit_bounds[0] == 0 and durations.bucket_counts[0] == 0  # min > 0
    (tokens,) = metrics["megatron.training.tokens_per_sec"].data_points
    assert isinstance(tokens.value, float) and tokens.value > 0


def test_off_records_nothing(pretrain_runs):
    run = _run(pretrain_runs, "off")
    assert run.results[0]["configured_groups"] == [[]]
    assert not run.capture.exists() or run.spans() == [] and run.metrics() == {}


# --------------------------------------------------------------------------------------------
# pipeline and data parallel


def test_pipeline_stages_train_together(pretrain_runs):
    losses = {}
    for name in ("pp", "pp_first"):
        run = _run(pretrain_runs, name)
        spans = run.spans()
        by_id = {s["span_id"]: s for s in spans}
        for span in named(spans, "megatron.p2p.recv_forward") + named(spans, "megatron.p2p.send_backward"):
            assert by_id[span["parent_id"]]["name"] in (
                "megatron.train.iteration.forward_backward",
                "megatron.evaluate.step",
            ), (name, span["name"])
        first, last = run.results
        # only the last stage computes the loss; both stages see the same grad norm
        assert all(i["lm_loss"] is None for i in first["iterations"])
        assert all(i["lm_loss"] > 0 for i in last["iterations"])
        assert [i["grad_norm"] for i in first["iterations"]] == [i["grad_norm"] for i in last["iterations"]]
        losses[name] = last["iterations"]
    # which rank exports changes nothing the stages compute
    assert losses["pp"] == losses["pp_first"]
    # the last stage launches DDP's grad sync after the schedule's last backward, every iteration
    starts = named(_run(pretrain_runs, "pp").spans(), "megatron.grad_sync.start")
    assert len(starts) == 2


def test_data_parallel_ranks_agree(pretrain_runs):
    run = _run(pretrain_runs, "dp")
    first, second = run.results
    assert first["iterations"] == second["iterations"]
    assert first["open_spans"] is None or first["open_spans"] == []
    spans = run.spans()
    by_id = {s["span_id"]: s for s in spans}
    finishes = named(spans, "megatron.grad_sync.finish")
    assert len(finishes) == 2
    assert all(by_id[s["parent_id"]]["name"] == "megatron.train.iteration.forward_backward" for s in finishes)


# --------------------------------------------------------------------------------------------
# the DataLoader's worker processes


def test_dataloader_workers_forked_and_no_span_exported_twice(pretrain_runs):
    run = _run(pretrain_runs, "default")
    loader = run.results[0]["data_iterator"]
    assert loader["type"] == "_MultiProcessingDataLoaderIter"
    assert loader["workers"] == 2 and loader["start_method"] == "fork"
    spans = run.spans()
    assert {span["pid"] for span in spans} == {spans[0]["pid"]}
    assert spans[0]["pid"] not in loader["worker_pids"]
    counts = collections.Counter(span["span_id"] for span in spans)
    assert [key for key, count in counts.items() if count > 1] == []


# --------------------------------------------------------------------------------------------
# SIGTERM


def test_sigterm_with_exit_signal_handler_saves_and_exits(pretrain_runs):
    run = _run(pretrain_runs, "sigterm")
    result = run.results[0]
    # Megatron finishes the iteration the signal arrived in, saves, then sys.exit()s
    assert [i["iteration"] for i in result["iterations"]] == list(range(1, SIGTERM_AT + 2))
    assert result["finished"] is False and result["open_spans"] == []
    assert (run.checkpoints / f"iter_{SIGTERM_AT + 1:07d}").is_dir()
    spans = run.spans()
    (save,) = named(spans, "megatron.checkpoint.exposed_save")
    assert save["attributes"]["megatron.iteration"] == SIGTERM_AT + 1
    assert {s["name"] for s in spans if s["parent_id"] == save["span_id"]} >= {"megatron.checkpoint.save"}
    (interval,) = named(spans, "megatron.train")
    assert save["parent_id"] == interval["span_id"]


def test_sigterm_with_exit_signal_handler_keeps_the_interval_open_for_the_exit_save(pretrain_runs):
    spans = _run(pretrain_runs, "sigterm").spans()
    assert _nesting_violations(spans) == []


def test_sigterm_without_handler_ends_the_process_and_drains(pretrain_runs):
    run = _run(pretrain_runs, "killed")
    spans = run.spans()
    (_interval,) = named(spans, "megatron.train")
    iterations = named(spans, "megatron.train.iteration")
    done = [s["attributes"]["megatron.iteration"] for s in iterations if s["status"] != 2]
    assert done == list(range(KILL_AT))  # the iterations before the signal ended normally


def test_sigterm_ends_every_open_span_with_an_error_status(pretrain_runs):
    spans = _run(pretrain_runs, "killed").spans()
    interrupted = named(spans, "megatron.train.iteration", iteration=KILL_AT)
    assert len(interrupted) == 1 and interrupted[0]["status"] == 2  # STATUS_CODE_ERROR
    children = [s for s in spans if s["parent_id"] == interrupted[0]["span_id"]]
    assert "megatron.train.iteration.forward_backward" in {s["name"] for s in children}
    assert all(s["status"] == 2 for s in children if s["name"].endswith("forward_backward"))
    (interval,) = named(spans, "megatron.train")
    assert interval["status"] == 2


# --------------------------------------------------------------------------------------------
# telemetry never changes what training computes


def test_losses_and_grad_norms_bit_identical(pretrain_runs):
    runs = {name: _run(pretrain_runs, name).results[0]["iterations"] for name in IDENTICAL_RUNS}
    expected = runs["pristine"]
    assert len(expected) == TRAIN_ITERS and all(i["lm_loss"] > 0 and i["grad_norm"] > 0 for i in expected)
    for name, iterations in runs.items():
        assert [(i["lm_loss_hex"], i["grad_norm"]) for i in iterations] == [
            (i["lm_loss_hex"], i["grad_norm"]) for i in expected
        ], name


def test_saved_checkpoint_tensors_bit_identical(pretrain_runs, pristine_root, tmp_path):
    directories = {
        name: _run(pretrain_runs, name).checkpoints / f"iter_{TRAIN_ITERS:07d}" for name in IDENTICAL_RUNS
    }
    tensors = checkpoint_tensors(pristine_root, directories, tmp_path)
    expected = tensors["pristine"]
    params = [key for key in expected if "decoder.layers" in key or "embedding" in key]
    assert len(params) >= NUM_LAYERS and any("optimizer" in key for key in expected), sorted(expected)[:20]
    for name, found in tensors.items():
        assert sorted(found) == sorted(expected), name
        for key, tensor in expected.items():
            assert torch.equal(found[key], tensor), (name, key)
