"""megatron.training's ``pretrain()`` on one GPU under the instrumented fork, activation offload on.

    python -m tests.gpu.run_pretrain_gpu [--out DIR]        # from the repository root

Not run by ``.ci/run`` (it needs a GPU). Needs torch with CUDA, transformer-engine (Megatron
supports fine-grained activation offloading only with ``--transformer-impl transformer_engine``),
pybind11 and a C++ compiler (the dataset helpers), psutil and the OpenTelemetry SDK. Under five
minutes on one GPU.

What it does: builds the instrumented fork (``codegen.pipeline.generate`` into a temporary
directory, as the CPU tests do), runs the CPU tests' pretrain worker with ``--device cuda`` (no
CUDA redirects, megatron's stock transformer-engine layer spec, NCCL), a small GPT with
``--fine-grained-activation-offloading --offload-modules core_attn qkv_linear``, train 4
iterations, save at 2 and 4, evaluate at 2 and 4, ``--otel-span-groups all``; then checks the OTLP
JSON capture with ``codegen verify`` and that ``megatron.activation.offload`` and
``megatron.activation.reload`` (the two spans no CPU run reaches) were recorded under their
documented parents. Exit 0 when all holds; the capture and the worker's output stay in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

ARGV = [
    "--num-layers", "4", "--hidden-size", "512", "--num-attention-heads", "8",
    "--seq-length", "512", "--max-position-embeddings", "512", "--vocab-size", "1024",
    "--tokenizer-type", "NullTokenizer", "--mock-data", "--micro-batch-size", "2",
    "--global-batch-size", "8", "--lr", "0.0001", "--log-interval", "1", "--eval-iters", "1",
    "--train-iters", "4", "--save-interval", "2", "--eval-interval", "2", "--bf16",
    "--transformer-impl", "transformer_engine", "--fine-grained-activation-offloading",
    "--offload-modules", "core_attn", "qkv_linear", "--num-workers", "0",
]  # fmt: skip
EXPECTED = {
    "megatron.activation.offload": "megatron.layer.forward",
    "megatron.activation.reload": "megatron.microbatch.backward",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the capture and logs go (default: a temp dir)")
    options = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device: this script needs one GPU", file=sys.stderr)
        return 2
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        print("error: transformer-engine is not installed (activation offload needs it)", file=sys.stderr)
        return 2

    from codegen.atomic import write_tree
    from codegen.cli import main as codegen
    from codegen.pipeline import generate
    from tests.megatron_cpu.pretrain_harness import WORKER, build_dataset_helpers, read_spans

    started = time.time()
    out = options.out or Path(tempfile.mkdtemp(prefix="pretrain-gpu-"))
    out.mkdir(parents=True, exist_ok=True)
    generation = generate(REPO / "specs")
    fork = out / "fork" / "megatron-core"
    write_tree(
        fork, {path: new for path, (_old, new) in generation.changes.items()}, base=generation.source_root
    )
    helpers = build_dataset_helpers(
        generation.source_root / "megatron/core/datasets/helpers.cpp", out / "helpers"
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    env.update(PYTHONPATH=str(fork), NVTE_CPU_OFFLOAD_V1="1", CUDA_DEVICE_MAX_CONNECTIONS="1")
    run = out / "run"
    run.mkdir(exist_ok=True)
    command = [
        sys.executable, str(WORKER), "--out", str(run), "--port", str(port), "--telemetry", "all",
        "--helpers", str(helpers), "--device", "cuda", "--",
        *ARGV, "--save", str(run / "ckpt"),
    ]  # fmt: skip
    proc = subprocess.run(command, env=env, cwd=run, capture_output=True, text=True, timeout=600)
    (run / "output.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(
            f"pretrain exited {proc.returncode}; see {run / 'output.txt'}\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
        return 1
    capture = run / "capture.jsonl"
    verified = codegen(["verify", str(REPO / "specs"), str(capture), "--groups", ""])
    spans = read_spans(capture)
    by_id = {span["span_id"]: span for span in spans}
    problems = [] if verified == 0 else ["codegen verify reported findings (above)"]
    for name, parent in EXPECTED.items():
        found = [span for span in spans if span["name"] == name]
        if not found:
            problems.append(f"{name} was not recorded")
        elif any(by_id.get(span["parent_id"], {}).get("name") != parent for span in found):
            problems.append(f"{name} is not always under {parent}")
    result = json.loads((run / "result-0.json").read_text())
    names = sorted({span["name"] for span in spans})
    print(f"{len(spans)} spans, {len(names)} names: {', '.join(names)}")
    print(f"losses: {[i['lm_loss'] for i in result['iterations']]}; open at exit: {result['open_spans']}")
    if result["open_spans"]:
        problems.append(f"spans left open at exit: {result['open_spans']}")
    print(f"{time.time() - started:.0f} s; output in {out}")
    for problem in problems:
        print(f"problem: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
