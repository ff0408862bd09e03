"""Runs ``megatron.training.training.evaluate`` and ``train_step`` on CPU; a subprocess of the tests.

    python megatron_training_worker.py --out FILE --port P --runs off,all,default,job

``megatron`` is the instrumented fork (``PYTHONPATH``). Megatron's global state is set up the way
``initialize_megatron`` does it, minus what needs CUDA or a tokenizer: ``parse_args`` +
``validate_args`` on a tiny GPT argv, ``set_global_variables(args, build_tokenizer=False)``, a
one-rank gloo process group and ``initialize_model_parallel``. The model is the tiny GPT of
``megatron_cpu_worker.py`` (its CPU attention, data and ``forward_step_func``).

Each run builds everything afresh from the same seed and, between ``otel.enable(run)`` and
``otel.disable()``:

- ``evaluate`` (``--eval-iters 3``, two microbatches per step) on the bare model;
- two ``train_step`` calls on the model wrapped in megatron's ``DistributedDataParallel`` with
  ``get_megatron_optimizer`` (Adam; without transformer-engine or apex that is ``torch.optim.AdamW``
  inside megatron's ``FP32Optimizer``/``ChainedOptimizer``) and an ``OptimizerParamScheduler``.
  ``config.finalize_model_grads_func`` stays unset (``train()`` sets ``finalize_model_grads``):
  its ``finish_grad_sync`` calls ``torch.cuda.current_stream()``; with one rank there is nothing
  to reduce, and the optimizer reads the DDP buffers' ``main_grad`` all the same.

Run names as in ``megatron_cpu_worker.py``: ``off`` never calls ``enable``; any other name is a
span-group spec passed to ``otel.enable``.

What a CPU build of torch needs (nothing in megatron is patched; each is scoped to the run by
``cpu_shims``):

- ``megatron.core.timers.Timer`` calls ``torch.cuda.synchronize()`` on start/stop (evaluate's
  ``timers('evaluate', log_level=0)`` is always a real timer), and ``Timers.log`` allocates with
  ``device=torch.cuda.current_device()``: ``synchronize`` is a no-op (nothing to wait for on the
  CPU) and ``current_device`` answers ``"cpu"``;
- tensor factories asking for CUDA (the schedule's token counter, evaluate's ``total_loss_dict``,
  the DDP grad buffers, the optimizer's bookkeeping) go to the CPU (``CudaFactoriesOnCpu``);
- ``clip_grad_by_total_norm_fp32`` asserts ``torch.cuda.FloatTensor`` gradients, so the
  optimizer runs with ``clip_grad=0`` (no clipping; the grad norm is still computed and returned).
"""

from __future__ import annotations

import argparse
import os
import sys
import typing
import warnings
from typing import Any

warnings.filterwarnings("ignore")
# megatron/training uses typing.override (Python 3.12); 3.11 gets the identity decorator.
typing.override = getattr(typing, "override", lambda f: f)

import megatron_cpu_worker as base  # this script's directory is sys.path[0]
import torch
import torch.distributed as dist

EVAL_ITERS = 3
TRAIN_STEPS = 2
GLOBAL_BATCH = base.MICRO_BATCH * base.NUM_MICROBATCHES  # one data-parallel rank

OPTIONS = {
    "num-layers": base.NUM_LAYERS,
    "hidden-size": base.HIDDEN,
    "num-attention-heads": base.HEADS,
    "seq-length": base.SEQ,
    "max-position-embeddings": base.SEQ,
    "vocab-size": base.VOCAB,
    "micro-batch-size": base.MICRO_BATCH,
    "global-batch-size": GLOBAL_BATCH,
    "eval-iters": EVAL_ITERS,
    "train-iters": 10,
    "lr": 0.001,
}
ARGV = [
    *(item for name, value in OPTIONS.items() for item in (f"--{name}", str(value))),
    "--use-cpu-initialization",
    "--no-gradient-accumulation-fusion",
]


from cuda_on_cpu import cpu_shims


def init_megatron(port: int, megatron_argv: list[str] = ARGV):
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.global_vars import set_global_variables

    argv = sys.argv
    sys.argv = ["pretrain", *megatron_argv]
    try:
        args = parse_args()
    finally:
        sys.argv = argv
    args.rank, args.world_size = 0, 1
    validate_args(args)
    set_global_variables(args, build_tokenizer=False)
    base.init_distributed(0, 1, port, 1)
    return args


make_batches = base.make_batches  # otlp_worker.py takes it from here


def evaluate_once(spec: str, provider) -> dict[str, Any]:
    from megatron.training import training

    model = base.build_model()
    data = iter(make_batches(EVAL_ITERS * base.NUM_MICROBATCHES, base.SEED + 10))
    enabled: list[str] = []
    with cpu_shims(), base.telemetry(spec, provider, enabled):
        loss, non_loss, timelimit = training.evaluate(
            base.forward_step_func, data, [model], None, model.config
        )
    return {
        "enabled_groups": enabled,
        "loss": loss,
        "non_loss": non_loss,
        "timelimit": timelimit,
    }


def build_trainer():
    """The tiny GPT in megatron's DDP wrapper, its optimizer and scheduler (under ``cpu_shims``)."""
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
    )
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    model = base.build_model()
    config = model.config
    ddp = DistributedDataParallel(config, DistributedDataParallelConfig(), model)
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-3, params_dtype=torch.float32, clip_grad=0.0),
        [ddp],
    )
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=1e-3,
        min_lr=0.0,
        lr_warmup_steps=0,
        lr_decay_steps=100,
        lr_decay_style="constant",
        start_wd=0.0,
        end_wd=0.0,
        wd_incr_steps=100,
        wd_incr_style="constant",
    )
    return model, ddp, optimizer, scheduler


def train_once(spec: str, provider) -> dict[str, Any]:
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.training import training

    data = iter(make_batches(TRAIN_STEPS * base.NUM_MICROBATCHES, base.SEED + 20))
    steps = []
    enabled: list[str] = []
    with cpu_shims():
        model, ddp, optimizer, scheduler = build_trainer()
        config = model.config
        with base.telemetry(spec, provider, enabled):
            for iteration in range(TRAIN_STEPS):
                result = training.train_step(
                    base.forward_step_func,
                    data,
                    [ddp],
                    optimizer,
                    scheduler,
                    config,
                    get_forward_backward_func(),
                    iteration=iteration,
                )
                loss, skipped, _ckpt, should_exit, _code, grad_norm, _zeros, _logit = result
                steps.append(
                    {
                        "loss": loss,
                        "skipped": skipped,
                        "should_exit": should_exit,
                        "grad_norm": grad_norm,
                    }
                )
    return {
        "enabled_groups": enabled,
        "steps": steps,
        "optimizer": type(optimizer).__name__,
        "inner_optimizers": [
            type(getattr(o, "optimizer", o)).__name__
            for o in getattr(optimizer, "chained_optimizers", [optimizer])
        ],
        "params": {name: param.detach().clone() for name, param in model.named_parameters()},
    }


def main(argv: list[str] | None = None) -> None:
    from megatron.core import parallel_state

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", required=True)
    parser.add_argument("--port", type=int, required=True)
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")

    init_megatron(options.port)
    results: dict[str, Any] = {"evaluate": {}, "train_step": {}}
    try:
        for spec in options.runs.split(","):
            for what, run in (("evaluate", evaluate_once), ("train_step", train_once)):
                results[what][spec] = base.recorded(run, spec)
        results["megatron_file"] = sys.modules["megatron.training.training"].__file__
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    torch.save(results, options.out)


if __name__ == "__main__":
    main()
