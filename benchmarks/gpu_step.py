"""Step time of Megatron's own ``pretrain_gpt.py`` on one GPU, telemetry off and on; prints a table.

    python -m benchmarks.gpu_step --megatron-lm DIR [--iters 40] [--warmup 10] [--out DIR]
                                  [--arms off,default,all_sdk,all_lean] [--no-fusions]
                                  [--serving-steps N]

``DIR`` is a checkout of the Megatron-LM release that matches the pinned megatron-core (its
``pretrain_gpt.py``, ``gpt_builders.py`` and ``model_provider.py`` are copied into the work
directory and run from there, so that the instrumented fork, not the checkout's ``megatron/``, is
imported). The fork is built from ``specs/`` (``codegen.pipeline.generate``, the pinned release's
wheel, as the tests build it). Each arm is one ``torchrun --nproc-per-node 1`` run of a GPT shaped
like a ~1.3B model (24 layers, hidden 2048, 16 heads, seq 2048, micro-batch 2, global batch 16,
bf16, mock data, ``NullTokenizer`` with a 32,000 vocabulary, the local transformer implementation,
which needs no transformer-engine or apex), ``--iters`` iterations:

- ``off``: no ``--otel-*`` flag;
- ``default``: ``--otel-enabled --otel-span-groups default``, the runtime's own providers
  exporting over OTLP/HTTP to a live receiver (``benchmarks/receiver.py``, another process);
- ``all_sdk``: ``--otel-span-groups all`` under ``opentelemetry-instrument`` (the distro's global
  tracer provider, its batch span processor and OTLP/HTTP exporter: the SDK path);
- ``all_lean``: ``--otel-span-groups all``, the runtime's own providers (the lean path).

Per arm: the median of Megatron's own "elapsed time per iteration (ms)" log lines after
``--warmup`` iterations, its ratio to ``off``, and the spans the receiver got per iteration (all
spans of the run, startup included, over the iterations). ``--cpu-worker`` runs the same arms with
the runtime tests' CPU pretrain worker (``tests/megatron_cpu/megatron_pretrain_worker.py``: Megatron's
``pretrain()`` on a tiny GPT, CPU redirects) instead of ``torchrun pretrain_gpt.py``: what
``tests/megatron_cpu/test_gpu_step_bench.py`` runs. ``--serving-steps N`` adds the serving step
arm on the same fork: the dynamic inference engine's step, off, ``default`` and ``all``
(``benchmarks/engine_step.py``; on CPU with ``--cpu-worker``). See benchmarks/README.md ("GPU step").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = ("off", "default", "all_sdk", "all_lean")
ENTRY_FILES = ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py")
# A GPT shaped like a ~1.3B model, on one GPU without transformer-engine or apex.
GPT_1_3B = [
    "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
    "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "2",
    "--global-batch-size", "16", "--bf16", "--lr", "0.0001", "--min-lr", "0.00001",
    "--lr-decay-style", "constant", "--mock-data", "--tokenizer-type", "NullTokenizer",
    "--vocab-size", "32000", "--transformer-impl", "local", "--no-gradient-accumulation-fusion",
    "--no-persist-layer-norm", "--no-masked-softmax-fusion", "--log-interval", "1",
    "--eval-iters", "0", "--eval-interval", "1000000", "--save-interval", "1000000",
    "--distributed-backend", "nccl", "--num-workers", "1",
]  # fmt: skip
NO_FUSIONS = ["--no-bias-dropout-fusion", "--no-bias-gelu-fusion"]
# Megatron's training_log line: " iteration        3/      40 | ... | elapsed time per iteration (ms): 912.3 | ..."
_ITERATION = re.compile(r"iteration\s+(\d+)/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*([0-9.]+)")


def parse_iteration_ms(log: str) -> dict[int, float]:
    """Iteration number -> Megatron's own elapsed milliseconds for it, from a run's output."""
    return {int(m.group(1)): float(m.group(2)) for m in _ITERATION.finditer(log)}


def groups(arm: str) -> str | None:
    """The span groups an arm passes with ``--otel-span-groups`` (None: telemetry off)."""
    return {"off": None, "default": "default", "all_sdk": "all", "all_lean": "all"}[arm]


def arm_environment(arm: str, receiver: dict[str, str]) -> dict[str, str]:
    """What an arm adds to the environment: the receiver's OTLP endpoint (HTTP), and under
    ``opentelemetry-instrument`` the distro's exporters (traces only)."""
    if arm == "off":
        return {}
    env = {**receiver, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": f"gpu-{arm}"}
    if arm == "all_sdk":
        env |= {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}
    else:
        env |= {"MEGATRON_OTEL_EXPORTER": "otlp"}
    return env


def arm_command(arm: str, launch: list[str], instrument: str) -> list[str]:
    """``launch`` (the launcher and the entry with its arguments) with the arm's telemetry flags,
    under ``instrument`` (``opentelemetry-instrument``) for the SDK path."""
    spec = groups(arm)
    flags = [] if spec is None else ["--otel-enabled", "--otel-span-groups", spec]
    command = [*launch, *flags]
    return [instrument, *command] if arm == "all_sdk" else command


@dataclass
class ArmResult:
    arm: str
    iteration_ms: dict[int, float]
    spans: int
    seconds: float
    log: str = field(repr=False, default="")

    def median_ms(self, warmup: int) -> float:
        after = [ms for it, ms in sorted(self.iteration_ms.items()) if it > warmup]
        if not after:
            raise ValueError(f"{self.arm}: no iteration after the warm-up ({warmup}) was logged")
        return statistics.median(after)


def summarize(results: dict[str, ArmResult], warmup: int, iters: int) -> list[dict[str, object]]:
    """One row per arm: median ms per iteration after the warm-up, ratio to ``off``, spans per
    iteration."""
    off = results["off"].median_ms(warmup) if "off" in results else None
    rows = []
    for arm, result in results.items():
        ms = result.median_ms(warmup)
        rows.append(
            {
                "arm": arm,
                "median_ms": ms,
                "ratio": None if off is None else ms / off,
                "spans_per_iteration": result.spans / iters,
                "iterations_logged": len(result.iteration_ms),
            }
        )
    return rows


def table(rows: list[dict[str, object]], header: str) -> str:
    lines = [header, "", "| arm | median ms / iteration | / off | spans / iteration |", "|---|---|---|---|"]
    for row in rows:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}x"
        lines.append(
            f"| {row['arm']} | {row['median_ms']:.1f} | {ratio} | {row['spans_per_iteration']:.1f} |"
        )
    return "\n".join(lines) + "\n"


# -- the runs


def build_fork(out: Path) -> tuple[Path, Path]:
    """The instrumented megatron-core (the pinned wheel's tree, specs/ applied) under ``out``, with
    a no-op Makefile for the dataset helpers (the wheel ships them built; Megatron runs ``make``
    there at start-up and stops when it fails); and the pristine tree it came from."""
    sys.path.insert(0, str(REPO))
    from codegen.emit.tree import write_tree
    from codegen.pipeline import generate

    generation = generate(REPO / "specs")
    fork = out / "fork"
    write_tree(
        fork, {path: new for path, (_old, new) in generation.changes.items()}, base=generation.source_root
    )
    makefile = fork / "megatron" / "core" / "datasets" / "Makefile"
    if not makefile.exists():
        makefile.write_text("all:\n\t@true\n")
    return fork, generation.source_root


def run_arm(
    arm: str,
    launch: list[str],
    env: dict[str, str],
    cwd: Path,
    receiver: object,
    instrument: str,
    timeout: float,
) -> ArmResult:
    command = arm_command(arm, launch, instrument)
    started = time.perf_counter()
    proc = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    log = proc.stdout + proc.stderr
    (cwd / f"{arm}.log").write_text(" ".join(command) + "\n" + log)
    if proc.returncode != 0:
        raise RuntimeError(f"arm {arm}: {' '.join(command)} exited {proc.returncode}:\n{log[-3000:]}")
    counts = receiver.counts() if arm != "off" else {}  # type: ignore[attr-defined]
    spans = sum(counts.get(f"gpu-{arm}", {}).values())
    return ArmResult(arm, parse_iteration_ms(log), spans, time.perf_counter() - started, log)


def _free_port() -> int:
    sys.path.insert(0, str(REPO))
    from tests.support.ports import free_port

    return free_port()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_step", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--megatron-lm", type=Path, help="a Megatron-LM checkout of the matching release")
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10, help="iterations left out of the median")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--out", type=Path, help="work directory (logs, the fork); default: a temporary one")
    parser.add_argument(
        "--no-fusions", action="store_true", help="also --no-bias-dropout-fusion --no-bias-gelu-fusion"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per arm")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--fork", type=Path, help="an instrumented megatron-core tree (default: built from specs/)"
    )
    parser.add_argument(
        "--serving-steps", type=int, default=0, metavar="N",
        help="also the serving step arm: N dynamic-engine steps per arm (benchmarks/engine_step.py)",
    )  # fmt: skip
    parser.add_argument(
        "--cpu-worker", type=Path, metavar="HELPERS",
        help="CPU: the tests' pretrain worker on a tiny GPT (HELPERS: the built dataset helpers)",
    )  # fmt: skip
    options = parser.parse_args(argv)
    arms = [a for a in options.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        parser.error(f"unknown arms: {', '.join(sorted(unknown))}")
    work = options.out or Path(tempfile.mkdtemp(prefix="gpu-step-"))
    work.mkdir(parents=True, exist_ok=True)
    instrument = shutil.which(
        "opentelemetry-instrument", path=str(Path(sys.executable).parent)
    ) or shutil.which("opentelemetry-instrument")
    if "all_sdk" in arms and instrument is None:
        print(
            "error: opentelemetry-instrument is not installed (opentelemetry-instrumentation)",
            file=sys.stderr,
        )
        return 2
    if options.cpu_worker is None:
        import torch

        if not torch.cuda.is_available():
            print(
                "error: no CUDA device: this benchmark needs one GPU (--cpu-worker runs it on CPU)",
                file=sys.stderr,
            )
            return 2
        if options.megatron_lm is None or not all((options.megatron_lm / f).exists() for f in ENTRY_FILES):
            print(f"error: --megatron-lm DIR must hold {', '.join(ENTRY_FILES)}", file=sys.stderr)
            return 2
    fork = options.fork or build_fork(work)[0]
    for name in ENTRY_FILES if options.cpu_worker is None else ():
        shutil.copy(options.megatron_lm / name, work / name)
    sys.path.insert(0, str(REPO))
    from benchmarks.receiver import ReceiverProcess

    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    base |= {
        "PYTHONPATH": os.pathsep.join([str(fork), str(REPO / "tests" / "megatron_cpu")]),
        "PYTHONWARNINGS": "ignore",
    }
    results: dict[str, ArmResult] = {}
    with ReceiverProcess("http") as receiver:
        for arm in arms:
            arm_dir = work / arm
            arm_dir.mkdir(exist_ok=True)
            port = str(_free_port())
            if options.cpu_worker is None:
                launch = [
                    sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
                    "--master-port", port, str(work / "pretrain_gpt.py"), *GPT_1_3B,
                    "--train-iters", str(options.iters), *(NO_FUSIONS if options.no_fusions else []),
                ]  # fmt: skip
                env = base | {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
            else:
                from tests.megatron_cpu.pretrain_harness import MODEL_ARGV, WORKER

                # off: no telemetry at all; else the worker passes no flag (arm_command adds them) and
                # leaves the providers to the runtime (--live) or to opentelemetry-instrument
                mode = {"off": [], "all_sdk": ["--providers", "global"]}.get(arm, ["--live"])
                launch = [
                    sys.executable, str(WORKER), "--out", str(arm_dir), "--port", port,
                    "--telemetry", "plain" if arm == "off" else "off", "--helpers", str(options.cpu_worker),
                    *mode,
                    "--", *MODEL_ARGV, "--train-iters", str(options.iters), "--eval-interval", "1000000",
                ]  # fmt: skip
                env = dict(base)
            env |= arm_environment(arm, receiver.environ)
            print(f"{arm}: {options.iters} iterations ...", file=sys.stderr)
            results[arm] = run_arm(arm, launch, env, arm_dir, receiver, instrument or "", options.timeout)
    rows = summarize(results, options.warmup, options.iters)
    shape = (
        "tiny GPT on CPU (the tests' pretrain worker)"
        if options.cpu_worker
        else "GPT ~1.3B (24 layers, hidden 2048, seq 2048, bf16), one GPU"
    )
    text = table(
        rows,
        f"pretrain_gpt step time, {shape}; median after {options.warmup} warm-up iterations of {options.iters}",
    )
    print(text, end="")
    if options.json:
        options.json.write_text(json.dumps(rows, indent=1))
    if options.serving_steps:
        from benchmarks import engine_step

        serving = [
            "--fork", str(fork), "--steps", str(options.serving_steps),
            "--warmup", str(options.serving_steps // 10), "--out", str(work / "serving"),
            "--device", "cpu" if options.cpu_worker else "cuda",
        ]  # fmt: skip
        if options.json:
            serving += ["--json", str(options.json.with_name(options.json.stem + "-serving.json"))]
        return engine_step.main(serving)
    return 0


if __name__ == "__main__":
    sys.exit(main())
