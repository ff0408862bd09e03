"""Cost of telemetry per training step: megatron.training's real ``train_step`` on CPU, timed
with telemetry off, ``default`` and ``all`` interleaved in one process; prints JSON.

    PYTHONPATH=FORK python benchmarks/step_worker.py --shape tiny|layer --rounds N --port P

``FORK`` is the instrumented megatron-core (``codegen apply specs/ --out FORK``). The model,
data, ``forward_step_func``, Megatron's global state, DDP wrapper and optimizer are those of the
runtime tests (``tests/megatron_cpu/megatron_training_worker.py``, with its CPU redirects). Every
round runs one ``train_step`` per arm in a shuffled order: ``off`` (telemetry never enabled), a
second ``off`` (the noise floor: how far two identical arms drift apart), ``default`` and ``all``
(``otel.enable(spec)`` before the step, ``disable()`` after, outside the timed region). Spans are
recorded by an SDK ``TracerProvider`` with a ``SimpleSpanProcessor`` into an in-memory exporter,
cleared after every step.

The SDK's own cost to record one span (``with tracer.start_as_current_span(name,
attributes={"megatron.span_group": ...}): pass``, a span made current as nesting needs), two ways,
with the same provider: in a tight loop (caches warm), and in place: a fifth arm, ``probe`` (``all``, its step time not reported), wraps ``otel.start_span`` and
times every span the runtime records next to one bare SDK span recorded at the same moment, the
order alternating, so both pay the same cold caches between torch kernels.

Shapes: ``tiny`` is the runtime tests' GPT (2 layers, hidden 64, seq 16, 2 microbatches of 2);
``layer`` has layers shaped like a real model's (hidden 1024, 16 heads, seq 1024, 2 layers,
2 microbatches of 1).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import typing
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
typing.override = getattr(typing, "override", lambda f: f)
TESTS = Path(__file__).resolve().parents[1] / "tests" / "megatron_cpu"
sys.path.insert(0, str(TESTS))

import megatron_cpu_worker as base
import megatron_training_worker as training_worker
import torch

SHAPES = {
    "tiny": dict(NUM_LAYERS=2, HIDDEN=64, HEADS=4, SEQ=16, VOCAB=128, MICRO_BATCH=2, NUM_MICROBATCHES=2),
    "layer": dict(
        NUM_LAYERS=2, HIDDEN=1024, HEADS=16, SEQ=1024, VOCAB=1024, MICRO_BATCH=1, NUM_MICROBATCHES=2
    ),
}
ARMS = ("off", "off2", "default", "all")
TIMED = ARMS + ("probe",)


class Probe:
    """Wraps ``otel.start_span``: times each runtime span (start + end) and a bare SDK span beside it."""

    def __init__(self, otel, tracer) -> None:
        self.otel, self.tracer, self.start_span = otel, tracer, otel.start_span
        self.runtime_s = self.sdk_s = 0.0
        self.spans = 0

    def sdk_span(self) -> None:
        start = time.perf_counter()
        with self.tracer.start_as_current_span("megatron.probe", attributes={"megatron.span_group": "layer"}):
            pass
        self.sdk_s += time.perf_counter() - start

    def __call__(self, *args, **kwargs):
        sdk_first = self.spans % 2 == 0
        if sdk_first:
            self.sdk_span()
        start = time.perf_counter()
        span = self.start_span(*args, **kwargs)
        self.runtime_s += time.perf_counter() - start
        self.spans += 1
        if not sdk_first:
            self.sdk_span()
        return _Timed(self, span) if span else span


class _Timed:
    __slots__ = ("probe", "span")

    def __init__(self, probe: Probe, span) -> None:
        self.probe, self.span = probe, span

    def set_attributes(self, attributes):
        return self.span.set_attributes(attributes)

    def end(self) -> None:
        start = time.perf_counter()
        self.span.end()
        self.probe.runtime_s += time.perf_counter() - start


def megatron_argv() -> list[str]:
    return [
        "--num-layers", str(base.NUM_LAYERS), "--hidden-size", str(base.HIDDEN),
        "--num-attention-heads", str(base.HEADS), "--seq-length", str(base.SEQ),
        "--max-position-embeddings", str(base.SEQ), "--vocab-size", str(base.VOCAB),
        "--micro-batch-size", str(base.MICRO_BATCH),
        "--global-batch-size", str(base.MICRO_BATCH * base.NUM_MICROBATCHES),
        "--train-iters", "100000", "--lr", "0.001", "--use-cpu-initialization",
        "--no-gradient-accumulation-fusion",
    ]  # fmt: skip


def sdk_span_cost(provider, exporter, spans: int = 2000, rounds: int = 15) -> float:
    """Median seconds for the SDK alone to start and end one recorded span (with the group attribute)."""
    tracer = provider.get_tracer("bench")
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(spans):
            with tracer.start_as_current_span(
                "megatron.layer.forward", attributes={"megatron.span_group": "layer"}
            ):
                pass
        samples.append((time.perf_counter() - start) / spans)
        exporter.clear()
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--port", type=int, required=True)
    options = parser.parse_args()
    for key, value in SHAPES[options.shape].items():
        setattr(base, key, value)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")

    from megatron.core import otel
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.training import training

    training_worker.init_megatron(options.port, megatron_argv())
    provider, exporter = base.make_provider()
    steps = options.warmup + options.rounds
    batches = training_worker.make_batches(base.NUM_MICROBATCHES, base.SEED + 20)
    times: dict[str, list[float]] = {arm: [] for arm in TIMED}
    spans: dict[str, list[int]] = {arm: [] for arm in TIMED}
    probe = Probe(otel, provider.get_tracer("bench"))
    order = random.Random(0)
    with training_worker.cpu_shims():
        model = base.build_model()
        ddp = DistributedDataParallel(model.config, DistributedDataParallelConfig(), model)
        optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=1e-3, params_dtype=torch.float32, clip_grad=0.0), [ddp]
        )
        scheduler = OptimizerParamScheduler(
            optimizer, init_lr=0.0, max_lr=1e-3, min_lr=0.0, lr_warmup_steps=0, lr_decay_steps=10**6,
            lr_decay_style="constant", start_wd=0.0, end_wd=0.0, wd_incr_steps=10**6,
            wd_incr_style="constant",
        )  # fmt: skip
        forward_backward = get_forward_backward_func()
        for step in range(steps):
            arms = list(TIMED)
            order.shuffle(arms)
            for arm in arms:
                if arm in ("default", "all", "probe"):
                    otel.enable("all" if arm == "probe" else arm, tracer_provider=provider)
                if arm == "probe" and step >= options.warmup:
                    otel.start_span = probe
                data = iter(batches)
                start = time.perf_counter()
                training.train_step(
                    base.forward_step_func, data, [ddp], optimizer, scheduler, model.config,
                    forward_backward, iteration=step,
                )  # fmt: skip
                elapsed = time.perf_counter() - start
                otel.start_span = probe.start_span
                if arm in ("default", "all", "probe"):
                    otel.disable()
                recorded = len(exporter.get_finished_spans())
                exporter.clear()
                if step >= options.warmup:
                    times[arm].append(elapsed)
                    spans[arm].append(recorded)
        sdk = sdk_span_cost(provider, exporter)
    print(
        json.dumps(
            {
                "shape": options.shape,
                "sizes": SHAPES[options.shape],
                "rounds": options.rounds,
                "python": sys.version.split()[0],
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "median_s": {arm: statistics.median(times[arm]) for arm in ARMS},
                "times_s": times,
                "spans_per_step": {arm: statistics.median(spans[arm]) for arm in ARMS},
                "sdk_span_s": sdk,
                "probe": {
                    "spans": probe.spans,
                    "runtime_span_s": probe.runtime_s / max(probe.spans, 1),
                    "sdk_span_s": probe.sdk_s / max(probe.spans, 1),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
