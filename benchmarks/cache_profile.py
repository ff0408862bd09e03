"""Per-span instructions and cache misses on the training thread, counted by cachegrind.

    .tox/runtime/bin/python -m benchmarks.cache_profile [--spans N] [--evict call|layer] [--out FILE]

In place (inside ``train_step``) a span costs several times its tight-loop time on both paths: the
caches are cold after torch's kernels, so what a span touches matters more than how many
instructions it runs. Timers on a shared machine cannot resolve that; valgrind's cachegrind counts
it exactly. A worker records ``N`` layer-shaped spans (``layer.forward`` with two children, the
statement sites' ``start_span``/``end``) through the runtime configured as a job configures it, each
span call after copying a 4 MiB buffer into another (which evicts the simulated 32 KiB L1 and 1 MiB
last-level caches, as torch's kernels evict the real ones); the same worker with the span groups off
is the baseline (``--evict layer``: one copy a layer, after its end, as the whole-process step waits
once a layer: ``pause_sweep.py`` times that case). Neither exports while it is counted (cachegrind
counts every thread: the export thread's schedule delay is a day, its batch a million spans). Both
freeze the start-up heap out of the garbage collector's way, run with ``PYTHONHASHSEED=0`` and copy
between the same two buffers every time: with a random hash seed, or a fresh allocation per copy
(whose alignment changes memcpy's instruction count), runs of the same worker differ by thousands of
instructions per span at a small ``--spans``. Reported per span: instructions (Ir), instruction and
data reads missing the last-level cache (ILmr, DLmr), for the lean path and the SDK path. Needs
``valgrind`` on PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import print_table

REPO = Path(__file__).resolve().parents[1]
CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,16,64")
EVENTS = ("Ir", "ILmr", "DLmr", "I1mr", "D1mr")

WORKER = """
import os, sys
sys.path.insert(0, {repo!r})
os.environ.update(MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_SPAN_GROUPS="all",
    MEGATRON_OTEL_EXPORTER="otlp", MEGATRON_OTEL_METRICS_ENABLED="0",
    MEGATRON_OTEL_OWN_PROVIDERS="1", OTEL_BSP_MAX_QUEUE_SIZE="1000000",
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE="1000000", OTEL_BSP_SCHEDULE_DELAY="86400000")
import codegen.otel_runtime as otel
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

class Null(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

null = Null()
otel._export.otlp_exporter = lambda settings, signal, kind: null if signal == "trace" else None
otel._lean_install.ALLOWED = {lean}
buffer, sink = bytearray(4 << 20), bytearray(4 << 20)
otel.configure()
if not {on}:
    otel.disable()
import gc
gc.collect()
gc.freeze()  # start-up garbage: a collection of it in one run and not the other is not a span's
root = otel.STEP and otel.start_span("megatron.train.iteration")
for i in range({rounds}):
    {call}layer = otel.LAYER and otel.start_span("megatron.layer.forward", lambda: {{"megatron.layer_number": i}})
    {call}child = otel.LAYER and otel.start_span("megatron.layer.self_attention")
    {call}child and child.end()
    {call}child = otel.LAYER and otel.start_span("megatron.layer.mlp")
    {call}child and child.end()
    {call}layer and layer.end()
    {layer}
root and root.end()
os._exit(0)  # the buffered spans are not exported: only recording is counted
"""


def summary(path: Path) -> dict[str, int]:
    events: list[str] = []
    values: list[int] = []
    for line in path.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            values = [int(v) for v in line.split()[1:]]
    return dict(zip(events, values, strict=True))


# where the worker copies the buffer: before each span call, or once a layer (after its end)
EVICT = {
    "call": {"call": "sink[:] = buffer; ", "layer": ""},
    "layer": {"call": "", "layer": "sink[:] = buffer"},
}


def count(lean: bool, on: bool, rounds: int, folder: Path, evict: str = "call") -> dict[str, int]:
    script = folder / "worker.py"
    script.write_text(WORKER.format(repo=str(REPO), lean=lean, on=on, rounds=rounds, **EVICT[evict]))
    out = folder / f"cachegrind.{lean}.{on}"
    subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=yes", *CACHES, f"--cachegrind-out-file={out}",
         sys.executable, str(script)],
        check=True, capture_output=True, timeout=1800,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    return summary(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=450, help="spans per run (a multiple of 3)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument(
        "--evict",
        choices=sorted(EVICT),
        default="call",
        help="copy the 4 MiB buffer before each span call (default), or once a layer of three spans, "
        "as the whole-process step waits once a layer",
    )
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("benchmarks.cache_profile needs valgrind (cachegrind) on PATH")
    rounds = options.spans // 3
    spans = 3 * rounds + 1
    lines = [
        "# per span on the training thread, counted by cachegrind ("
        + (
            "each call after a 4 MiB copy)"
            if options.evict == "call"
            else "a 4 MiB copy once a layer of three spans)"
        ),
        f"# command: .tox/runtime/bin/python -m benchmarks.cache_profile --spans {options.spans}"
        + (f" --evict {options.evict}" if options.evict != "call" else "")
        + (f" --out {options.out}" if options.out else ""),
        f"# python {sys.version.split()[0]}; simulated caches {' '.join(CACHES)}",
        f"{'path':10s} " + " ".join(f"{e:>9s}" for e in EVENTS) + "  LL misses",
    ]
    per_path = {}
    with tempfile.TemporaryDirectory(prefix="cache-profile-") as tmp:
        for name, lean in (("lean", True), ("SDK", False)):
            on, off = (count(lean, flag, rounds, Path(tmp), options.evict) for flag in (True, False))
            per_path[name] = {e: (on[e] - off[e]) / spans for e in EVENTS}
            row = per_path[name]
            lines.append(
                f"{name:10s} "
                + " ".join(f"{row[e]:9.0f}" for e in EVENTS)
                + f"  {row['ILmr'] + row['DLmr']:9.0f}"
            )
    lean, sdk = per_path["lean"], per_path["SDK"]
    lines.append(
        f"lean / SDK: instructions {lean['Ir'] / sdk['Ir']:.2f}x, last-level misses "
        f"{(lean['ILmr'] + lean['DLmr']) / (sdk['ILmr'] + sdk['DLmr']):.2f}x"
    )
    print_table(lines, options.out)


if __name__ == "__main__":
    main()
