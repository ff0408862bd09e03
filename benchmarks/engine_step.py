"""The serving step arm of the GPU step benchmark: the dynamic inference engine's own step code
(``DynamicInferenceEngine.async_step`` -> ``async_forward`` -> ``async_bookkeep``, the
instrumented fork's), telemetry off and on; prints a table.

    python -m benchmarks.engine_step [--fork DIR] [--steps 2000] [--warmup 200] [--device cuda|cpu]
                                     [--arms off,default,all] [--json FILE]

Each arm is one process (``--worker``) that calls ``otel.configure()`` as a serving process does,
imports the fork's engine module and steps an engine
whose controller and context are stand-ins: the controller's
``async_generate_output_tokens_dynamic_batch`` is the step's forward, and the context holds the
step's batch (8 decode requests, 1 prefill of 120 tokens) as ``DynamicInferenceContext`` holds it
after a forward (``batch_dimensions``, ``num_speculative_tokens``, ``kv_block_allocator``). With
``--device cuda`` the forward is one GPU-sized GEMM per step (the batch's tokens x hidden 4096 x
16384, bf16, synchronized), with ``--device cpu`` it returns at once: the cost measured is then
the instrumentation's beside the engine's own bookkeeping, the upper bound of its ratio. A real
model's forward (a checkpoint, ``DynamicInferenceContext``'s CUDA KV cache) is what a GPU run of
the engine with a model adds; this arm leaves it out so that it runs wherever the engine module
imports.

- ``off``: ``MEGATRON_OTEL_ENABLED=0``;
- ``default``: the ``default`` preset (the step's span and hook are off: their disabled cost);
- ``all``: every group, the runtime's own providers, the console exporter into the worker's
  output file (its spans are counted there).

Per arm: the median step time in microseconds after ``--warmup`` steps, its ratio to ``off``, and
the ``megatron.inference.step`` spans exported per step. ``tests/megatron_cpu/test_gpu_step_bench.py``
runs it on CPU. See benchmarks/README.md ("GPU step").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ARMS = ("off", "default", "all")
STEP_SPAN = "megatron.inference.step"
# the step's batch: 8 decoding requests and one prompt of 120 tokens being prefilled
DECODE, PREFILL_TOKENS = 8, 120


def arm_environment(arm: str) -> dict[str, str]:
    """The telemetry variables of an arm."""
    if arm == "off":
        return {"MEGATRON_OTEL_ENABLED": "0"}
    groups = {"default": "default", "all": "all"}[arm]
    return {
        "MEGATRON_OTEL_ENABLED": "1",
        "MEGATRON_OTEL_SPAN_GROUPS": groups,
        "MEGATRON_OTEL_EXPORTER": "console",
        "MEGATRON_OTEL_METRICS_ENABLED": "0",
    }


class _Controller:
    """The step's forward: a GPU-sized GEMM (cuda) or nothing (cpu)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.step: Any = None
        if device == "cuda":
            import torch

            tokens = DECODE + PREFILL_TOKENS
            self.x = torch.randn(tokens, 4096, device="cuda", dtype=torch.bfloat16)
            self.w = torch.randn(4096, 16384, device="cuda", dtype=torch.bfloat16)
            self.torch = torch

    async def async_generate_output_tokens_dynamic_batch(self, **_: Any) -> Any:
        if self.device == "cuda":
            self.torch.matmul(self.x, self.w)
            self.torch.cuda.synchronize()
        return SimpleNamespace(decode_only=False, output=None)


def _engine(device: str) -> Any:
    """An engine of the fork's DynamicInferenceEngine class, its controller and context stand-ins."""
    from megatron.core.inference.config import AsyncScheduleMode
    from megatron.core.inference.engines.dynamic_engine import DynamicInferenceEngine, EngineState

    engine = object.__new__(DynamicInferenceEngine)
    engine.state = EngineState.RUNNING
    engine.controller = _Controller(device)
    engine.logging_step_interval = 0
    engine.failed_request_ids = []
    engine.use_coordinator = False
    engine.schedule_waiting_requests = lambda: None  # nothing waits: the batch is formed
    engine.context = SimpleNamespace(
        config=SimpleNamespace(async_sched_mode=AsyncScheduleMode.LEGACY),
        num_prefill_requests=1,
        step_count=0,
        prefix_cache_lru_clock=0,
        active_token_count=DECODE + PREFILL_TOKENS,
        chunked_prefill_request_id=-1,
        enable_prefix_caching=False,
        batch_dimensions=SimpleNamespace(
            token_count=DECODE + PREFILL_TOKENS, prefill_req_count=1, decode_req_count=DECODE
        ),
        num_speculative_tokens=0,
        kv_block_allocator=SimpleNamespace(get_total_used=lambda: 64),
    )
    return engine


def worker(steps: int, device: str) -> dict[str, Any]:
    """Step the engine ``steps`` times in this process; each step's microseconds."""
    import megatron.core.inference.engines.dynamic_engine as module
    from megatron.core import otel

    otel.configure()  # as a serving process sets telemetry up (its variables: arm_environment)
    engine = _engine(device)
    times: list[float] = []

    async def loop() -> None:
        for _ in range(steps):
            start = time.perf_counter()
            await engine.async_step()
            times.append((time.perf_counter() - start) * 1e6)

    asyncio.run(loop())
    otel.shutdown()
    return {"engine_file": module.__file__, "step_us": times, "steps": engine.context.step_count}


def run_arm(arm: str, fork: Path, steps: int, device: str, work: Path, timeout: float) -> dict[str, Any]:
    out, rows = work / f"{arm}.out", work / f"{arm}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    env |= arm_environment(arm) | {
        "PYTHONPATH": os.pathsep.join([str(fork), str(REPO)]),
        "PYTHONWARNINGS": "ignore",
    }
    command = [
        sys.executable,
        "-m",
        "benchmarks.engine_step",
        "--worker",
        str(rows),
        "--steps",
        str(steps),
        "--device",
        device,
    ]
    with out.open("w") as sink:
        proc = subprocess.run(
            command, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    if proc.returncode != 0:
        raise RuntimeError(f"arm {arm}: exited {proc.returncode}:\n{out.read_text()[-3000:]}")
    result = json.loads(rows.read_text())
    result["spans"] = out.read_text().count(f'"{STEP_SPAN}"')
    return result


def summarize(results: dict[str, dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    medians = {arm: statistics.median(r["step_us"][warmup:]) for arm, r in results.items()}
    off = medians.get("off")
    return [
        {
            "arm": arm,
            "median_us": medians[arm],
            "ratio": None if off is None else medians[arm] / off,
            "spans_per_step": r["spans"] / r["steps"],
            "steps": r["steps"],
        }
        for arm, r in results.items()
    ]


def table(rows: list[dict[str, Any]], header: str) -> str:
    lines = [header, "", "| arm | median us / step | / off | step spans / step |", "|---|---|---|---|"]
    for row in rows:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}x"
        lines.append(f"| {row['arm']} | {row['median_us']:.1f} | {ratio} | {row['spans_per_step']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.engine_step", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--fork", type=Path, help="an instrumented megatron-core tree (default: built from specs/)"
    )
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200, help="steps left out of the median")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--out", type=Path, help="work directory; default: a temporary one")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per arm")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker is not None:
        options.worker.write_text(json.dumps(worker(options.steps, options.device)))
        return 0
    arms = [a for a in options.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        parser.error(f"unknown arms: {', '.join(sorted(unknown))}")
    if options.warmup >= options.steps:
        parser.error("--warmup must be below --steps")
    if options.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: no CUDA device: --device cpu runs the step on CPU", file=sys.stderr)
            return 2
    work = options.out or Path(tempfile.mkdtemp(prefix="engine-step-"))
    work.mkdir(parents=True, exist_ok=True)
    if options.fork is None:
        from benchmarks.gpu_step import build_fork

        options.fork = build_fork(work)[0]
    results = {}
    for arm in arms:
        print(f"{arm}: {options.steps} engine steps ...", file=sys.stderr)
        results[arm] = run_arm(arm, options.fork, options.steps, options.device, work, options.timeout)
    rows = summarize(results, options.warmup)
    forward = (
        "one GEMM of the batch (128 tokens x 4096 x 16384, bf16)"
        if options.device == "cuda"
        else "none (CPU)"
    )
    header = (
        f"dynamic engine step (async_step), stand-in forward: {forward}; "
        f"median after {options.warmup} warm-up steps of {options.steps}"
    )
    print(table(rows, header), end="")
    if options.json:
        options.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
