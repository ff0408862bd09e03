"""megatron.training's own ``pretrain()`` on CPU: the configurations, running them, reading results.

Each configuration is one run of ``megatron_pretrain_worker.py`` (one process per rank) under the
pristine release or the instrumented fork. Runs are independent subprocesses; two one-rank runs
go side by side (the machine's two cores), a two-rank run goes alone. See the worker's docstring
for what a CPU build of torch needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from codegen.capture import CapturedMetric, read_metrics
from tests.support.megatron_workers import communicate_all
from tests.support.otlp_json import read_spans

HERE = Path(__file__).resolve().parent
WORKER = HERE / "megatron_pretrain_worker.py"
RUN_TIMEOUT_S = 300

NUM_LAYERS = 2
SAVE_INTERVAL = 2
TRAIN_ITERS = 4  # fresh runs: intervals [0, 2) and [2, 4), checkpoints at 2 and 4
RESUME_ITERS = 6  # the resumed run: iterations 4 and 5 in one interval
SIGTERM_AT = 2  # the --exit-signal-handler run gets SIGTERM inside its third iteration
KILL_AT = 1  # the run without Megatron's handler gets SIGTERM inside its second iteration
# Timestamps a launcher exports (backdated startup phases and pre_startup), seconds before start.
LAUNCH_OFFSETS = {
    "MEGATRON_OTEL_JOB_START_TIME": 3.0,
    "MEGATRON_OTEL_LAUNCH_SCRIPT_START_TIME": 2.0,
    "MEGATRON_OTEL_PRE_SRUN_TIME": 1.0,
}

# A tiny GPT (the model of megatron_cpu_worker.py), mock data, gloo; what CPU needs (see the worker).
MODEL_ARGV = [
    "--num-layers", str(NUM_LAYERS), "--hidden-size", "64", "--num-attention-heads", "4",
    "--seq-length", "16", "--max-position-embeddings", "16", "--vocab-size", "128",
    "--tokenizer-type", "NullTokenizer", "--mock-data", "--micro-batch-size", "2",
    "--global-batch-size", "4", "--lr", "0.001", "--log-interval", "1", "--eval-iters", "1",
    "--attention-dropout", "0", "--hidden-dropout", "0", "--transformer-impl", "local",
    "--use-cpu-initialization", "--no-gradient-accumulation-fusion", "--no-persist-layer-norm",
    "--clip-grad", "0.0", "--no-load-rng", "--distributed-backend", "gloo",
]  # fmt: skip
# Options that make more of train() run: weight-hash check, params norm, manual GC, throughput,
# overlapped grad reduce (DDP's start_grad_sync in the pipeline schedules).
LOOP_ARGV = [
    "--check-weight-hash-across-dp-replicas-interval", str(SAVE_INTERVAL), "--log-params-norm",
    "--manual-gc", "--manual-gc-interval", "1", "--log-throughput", "--overlap-grad-reduce",
]  # fmt: skip


@dataclass(frozen=True)
class Config:
    """One run: the telemetry setting, the tree, ranks, Megatron flags, environment."""

    telemetry: str  # plain (pristine tree), off, or a span-group spec
    argv: tuple[str, ...]
    ranks: int = 1
    tree: str = "fork"  # or "pristine"
    env: tuple[tuple[str, str], ...] = ()
    save: bool = False
    load: str | None = None  # the configuration whose checkpoints this run resumes from
    sigterm_at: int | None = None
    expect_rc: int = 0
    live: bool = False  # export over OTLP to a live receiver (env names it) instead of capture.jsonl
    worker_args: tuple[str, ...] = ()  # more options of the worker (--raise-at, --repeat, ...)


def _fresh(telemetry: str, *extra: str, tree: str = "fork", iters: int = TRAIN_ITERS) -> Config:
    argv = (
        *MODEL_ARGV, *LOOP_ARGV, "--train-iters", str(iters),
        "--save-interval", str(SAVE_INTERVAL), "--eval-interval", str(SAVE_INTERVAL), *extra,
    )  # fmt: skip
    return Config(telemetry, argv, tree=tree, save=True)


PP_ARGV = (
    *MODEL_ARGV, "--pipeline-model-parallel-size", "2", "--overlap-grad-reduce",
    "--train-iters", "2", "--eval-interval", "2", "--num-workers", "0",
)  # fmt: skip

CONFIGS: dict[str, Config] = {
    # 1 rank, all groups: train 4 iterations, save and evaluate every 2
    "fresh": _fresh("all", "--num-workers", "0"),
    # the same on the runtime's own provider: the lean recording path (fresh's is a program's)
    "fresh_lean": replace(_fresh("all", "--num-workers", "0"), env=(("PRETRAIN_RECORDING", "lean"),)),
    # the same with telemetry off, the production preset, and on the pristine release
    "off": _fresh("off", "--num-workers", "0"),
    # default preset; a DataLoader with 2 worker processes (fork, the Linux default)
    "default": _fresh("default", "--num-workers", "2"),
    "pristine": _fresh("plain", "--num-workers", "0", tree="pristine"),
    # resume "fresh" from its last checkpoint (iteration 4) and train to 6
    "resume": replace(
        _fresh("all", "--num-workers", "0", "--override-opt_param-scheduler", iters=RESUME_ITERS),
        load="fresh",
    ),
    # 2 ranks, pipeline parallel 2, overlapped grad reduce; the last stage exports (the default):
    # it receives activations, sends gradients, and launches DDP's grad sync after the schedule
    "pp": Config("all", PP_ARGV, ranks=2),
    # the same run seen from the first stage (the one export rank set to 0): it sends
    # activations and receives gradients
    "pp_first": Config("all", PP_ARGV, ranks=2, env=(("MEGATRON_OTEL_EXPORT_RANK", "0"),)),
    # 2 ranks, data parallel 2; the last rank exports (the default)
    "dp": Config(
        "all",
        (*MODEL_ARGV, "--train-iters", "2", "--eval-interval", "2", "--num-workers", "0"),
        ranks=2,
    ),
    # SIGTERM mid-iteration with Megatron's --exit-signal-handler: it finishes the iteration,
    # saves a checkpoint and exits; the runtime drains on SIGTERM (flush timeout set)
    "sigterm": Config(
        "all",
        (
            *MODEL_ARGV,
            *["--train-iters", "6", "--save-interval", "4", "--eval-interval", "10", "--num-workers", "0"],
            "--exit-signal-handler",
        ),
        env=(("MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S", "5"),),
        save=True,
        sigterm_at=SIGTERM_AT,
    ),
    # SIGTERM mid-iteration without a handler of Megatron's: the runtime drains, then the
    # default action ends the process
    "killed": Config(
        "all",
        (*MODEL_ARGV, "--train-iters", "4", "--eval-interval", "10", "--num-workers", "0"),
        env=(("MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S", "5"),),
        sigterm_at=KILL_AT,
        expect_rc=-15,
    ),
}
# Scheduling: each batch's runs go side by side (at most two processes at a time).
BATCHES = (
    ("fresh", "off"),
    ("default", "pristine"),
    ("resume", "killed"),
    ("pp",),
    ("pp_first",),
    ("dp",),
    ("sigterm", "fresh_lean"),
)


@dataclass
class Run:
    name: str
    config: Config
    dir: Path
    returncodes: list[int] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    launch: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def capture(self) -> Path:
        return self.dir / "capture.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.dir / "ckpt"

    def check(self) -> None:
        """Fail with the output when a rank did not exit as the configuration expects."""
        bad = [
            f"rank {rank}: exit {rc} (expected {self.config.expect_rc})\n{out[-4000:]}"
            for rank, (rc, out) in enumerate(zip(self.returncodes, self.outputs))
            if rc != self.config.expect_rc
        ]
        if bad:
            raise AssertionError(f"pretrain run {self.name!r} failed:\n" + "\n---\n".join(bad))

    def spans(self) -> list[dict[str, Any]]:
        return read_spans(self.capture)

    def metrics(self) -> dict[str, CapturedMetric]:
        """The last export of each metric stream, by name."""
        return {metric.name: metric for metric in read_metrics(self.capture)}


def environment(root: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"):
        env.pop(key, None)
    env.update(
        PYTHONPATH=str(root),
        MASTER_ADDR="127.0.0.1",
        OMP_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
        # The fused bias-GELU/dropout functions are torch.compile'd; Inductor compiles them for
        # the CPU in ~30 s per process. Eager mode computes them on every run alike.
        TORCHDYNAMO_DISABLE="1",
    )
    env.update(extra)
    return env


def start(
    name: str, config: Config, roots: dict[str, Path], helpers: Path, work: Path, port: int
) -> tuple[Run, list]:
    run = Run(name, config, work / name)
    run.dir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    run.launch = {key: round(now - offset, 3) for key, offset in LAUNCH_OFFSETS.items()}
    env = environment(roots[config.tree], {**{k: str(v) for k, v in run.launch.items()}, **dict(config.env)})
    argv = list(config.argv)
    if config.save:
        argv += ["--save", str(run.checkpoints)]
    if config.load:
        argv += ["--load", str(work / config.load / "ckpt")]
    procs = []
    for rank in range(config.ranks):
        command = [
            sys.executable, str(WORKER), "--out", str(run.dir), "--rank", str(rank),
            "--world-size", str(config.ranks), "--port", str(port), "--telemetry", config.telemetry,
            "--helpers", str(helpers),
        ]  # fmt: skip
        if config.sigterm_at is not None:
            command += ["--sigterm-at", str(config.sigterm_at)]
        if config.live:
            command.append("--live")
        command += config.worker_args
        procs.append(
            subprocess.Popen(
                [*command, "--", *argv],
                cwd=run.dir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    run.seconds = now
    return run, procs


def finish(run: Run, procs: list) -> Run:
    for proc, (output, timed_out) in zip(procs, communicate_all(procs, RUN_TIMEOUT_S)):
        if timed_out:
            output += f"\n[timed out after {RUN_TIMEOUT_S}s]"
        run.returncodes.append(proc.returncode)
        run.outputs.append(output)
    run.seconds = time.time() - run.seconds
    (run.dir / "run.json").write_text(
        json.dumps(
            {
                "returncodes": run.returncodes,
                "outputs": run.outputs,
                "launch": run.launch,
                "seconds": run.seconds,
            }
        )
    )
    return _load_results(run)


def _load_results(run: Run) -> Run:
    for rank in range(run.config.ranks):
        path = run.dir / f"result-{rank}.json"
        run.results.append(json.loads(path.read_text()) if path.exists() else {})
    return run


def load_runs(work: Path) -> dict[str, Run] | None:
    """The runs a previous session left in ``work`` (``run.json`` in each), or None."""
    runs = {}
    for name, config in CONFIGS.items():
        path = work / name / "run.json"
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        run = Run(name, config, work / name, saved["returncodes"], saved["outputs"], launch=saved["launch"])
        run.seconds = saved["seconds"]
        runs[name] = _load_results(run)
    return runs


def run_all(roots: dict[str, Path], helpers: Path, work: Path, free_port) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    not_before = 0.0
    for batch in BATCHES:
        # A batch's startup spans are backdated by up to LAUNCH_OFFSETS: it starts that long after
        # the previous batch ended, so no two batches overlap in time (the report reads processes
        # running at the same time without a shared run id as two jobs mixed).
        time.sleep(max(0.0, not_before - time.time()))
        started = [start(name, CONFIGS[name], roots, helpers, work, free_port()) for name in batch]
        for run, procs in started:
            runs[run.name] = finish(run, procs)
        not_before = time.time() + max(LAUNCH_OFFSETS.values()) + 0.5
    return runs


def build_dataset_helpers(source: Path, dest: Path) -> Path:
    """``megatron/core/datasets/helpers.cpp`` built for this Python (the wheel ships cpython-312)."""
    import pybind11

    dest.mkdir(parents=True, exist_ok=True)
    target = dest / f"helpers_cpp{sysconfig.get_config_var('EXT_SUFFIX')}"
    includes = [f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}"]
    command = ["c++", "-O2", "-shared", "-std=c++17", "-fPIC", *includes, str(source), "-o", str(target)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return dest


# -- the span names each configuration records (test_pretrain_cpu.py, test_multirank.py) ---------

PHASES = (
    "megatron.startup.launch_script",
    "megatron.startup.container_load",
    "megatron.startup.imports",
    "megatron.startup.arg_parse",
    "megatron.startup.inprocess_setup",
    "megatron.startup.in_job_setup",
    "megatron.startup.initialize_megatron",
    "megatron.startup.jit_fusion_options",
)
STARTUP = {"pre_startup", "megatron.startup", *PHASES}
LOOP = {
    "megatron.train",
    "megatron.train.first_iteration",
    "megatron.train.iteration",
    "megatron.train.iteration.forward_backward",
    "megatron.train.iteration.optimizer",
    "megatron.train.iteration_report",
    "megatron.train.log",
    "megatron.checkpoint.ft_heartbeat",
    "megatron.checkpoint.save.finalize",
    "megatron.checkpoint.exit_finalize",
}
HOT = {
    "megatron.microbatch.forward",
    "megatron.microbatch.backward",
    "megatron.layer.forward",
    "megatron.layer.self_attention",
    "megatron.layer.mlp",
}
SETUP = {"megatron.startup.model_init", "megatron.startup.dataloader"}
EVALUATE = {"megatron.evaluate", "megatron.evaluate.step"}
SAVE = {
    "megatron.checkpoint.exposed_save",
    "megatron.checkpoint.reclaim_memory",
    "megatron.checkpoint.save",
    "megatron.checkpoint.save.state_dict",
    "megatron.checkpoint.save.io_write",
    "megatron.checkpoint.report_memory",
    "megatron.checkpoint.timers_log",
}
# LOOP_ARGV's options: weight-hash check, params norm, manual GC
LOOP_OPTIONS = {
    "megatron.startup.weight_hash_check",
    "megatron.train.params_norm",
    "megatron.train.gc_collect",
}

# every training run: startup, model setup, the loop, the layers, DDP's grad sync finished
TRAINED = STARTUP | SETUP | LOOP | HOT | {"megatron.grad_sync.finish"}
# one rank training with saves and evaluation, the loop's options on: every CPU-reachable span
FULL = TRAINED | EVALUATE | SAVE | LOOP_OPTIONS
# what both pipeline stages record of the P2P calls
P2P = {"megatron.p2p.recv_forward", "megatron.p2p.send_forward", "megatron.p2p.send_backward"}

OBSERVED: dict[str, set[str]] = {
    "fresh": FULL,
    "fresh_lean": FULL,
    "resume": FULL | {"megatron.checkpoint.load", "megatron.checkpoint.load.io_read"},
    # default = job, checkpoint, evaluate, first_iteration (inference has no spans yet)
    "default": (STARTUP | EVALUATE | SAVE | {"megatron.startup.weight_hash_check"})
    | {"megatron.train", "megatron.train.first_iteration"}
    | {
        "megatron.checkpoint.ft_heartbeat",
        "megatron.checkpoint.save.finalize",
        "megatron.checkpoint.exit_finalize",
    },
    # the last stage: activations in, gradients out; DDP's grad sync launched after the schedule
    "pp": TRAINED | EVALUATE | P2P | {"megatron.grad_sync.start"},
    # the first stage: activations out, gradients in
    "pp_first": TRAINED | EVALUATE | P2P | {"megatron.p2p.recv_backward"},
    "dp": TRAINED | EVALUATE,
    "sigterm": TRAINED | SAVE,
    "killed": TRAINED - {"megatron.checkpoint.exit_finalize"},
}


CHECKPOINT_DUMP = """\
import json, sys, torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
for src, dest in json.loads(sys.argv[1]):
    dcp_to_torch_save(src, dest + ".full")
    state = torch.load(dest + ".full", weights_only=False)
    tensors = {}
    def walk(prefix, value):
        if isinstance(value, torch.Tensor):
            tensors[prefix] = value
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}/{key}", item)
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(f"{prefix}/{index}", item)
    walk("", state)
    torch.save(tensors, dest)
"""


def checkpoint_tensors(root: Path, directories: dict[str, Path], dest: Path) -> dict[str, dict[str, Any]]:
    """Every tensor of each ``torch_dist`` checkpoint, read with torch.distributed.checkpoint in one
    subprocess (the checkpoints pickle megatron classes, so megatron must be importable there)."""
    import torch

    pairs = [(str(directory), str(dest / f"{name}.pt")) for name, directory in directories.items()]
    subprocess.run(
        [sys.executable, "-c", CHECKPOINT_DUMP, json.dumps(pairs)],
        check=True,
        env=environment(root, {}),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    return {name: torch.load(dest / f"{name}.pt", weights_only=False) for name in directories}
