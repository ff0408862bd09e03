"""Instructions per span of each part of the lean path's work, counted by callgrind on one thread:
repeatable on a loaded machine, and split where ``process_instructions.py`` gives per-thread totals.

    python -m benchmarks.record_instructions [--steps N] [--arm lean|distro] [--batch-size N]
                                             [--out FILE]

The runtime is configured as ``process_worker.py`` configures it (its own providers, or
``opentelemetry-instrument``'s with ``--arm distro``; OTLP/HTTP to the live receiver in a child
process, the default batch size of 512, or ``--batch-size``'s: how a request's fixed cost is
shared). The export thread is held back (its wake-up event
replaced), and this thread does each part alone, inside its own ``exec`` (callgrind's
``--dump-after=builtin_exec`` counts each): ``record`` (``--steps`` of ``process_worker``'s
786-span step with no sleeps, the statement sites' calls) minus ``off`` (the same steps with the
groups off); ``take`` (the batches taken from the buffers and their ids drawn, unless the
encoder draws them: then in ``encode``); ``encode`` (the OTLP bytes of every batch); ``send``
(each request through the exporter's HTTP client); ``free`` (the batches done with, as the
recorder is: ``_lean_span.recycle`` keeps the spans nothing else references, the rest
deallocated). Each is per span. First, not counted, as many steps recorded and exported (the
export thread's steady state: the spans it recycled wait to be started again). Needs valgrind;
about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import print_table
from benchmarks.timing import callgrind_totals

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PARTS = ("warm", "off", "record", "take", "encode", "send", "free")


def worker(steps: int, arm: str, batch_size: int) -> None:
    """Under callgrind: each part in its own exec, in ``PARTS`` order; prints the span count."""
    sys.path.insert(0, str(REPO))
    import threading

    from benchmarks.process_worker import step
    from benchmarks.receiver import ReceiverProcess

    receiver = ReceiverProcess("http").__enter__()
    os.environ.update(receiver.environ)
    os.environ.update(
        MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_EXPORTER="otlp", MEGATRON_OTEL_METRICS_ENABLED="0",
        MEGATRON_OTEL_SPAN_GROUPS="all", MEGATRON_OTEL_OWN_PROVIDERS="0" if arm == "distro" else "1",
        OTEL_BSP_MAX_QUEUE_SIZE=str(1000 * (steps + 2)), OTEL_BSP_SCHEDULE_DELAY="3600000",
        OTEL_SERVICE_NAME="record", OTEL_TRACES_EXPORTER="otlp", OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none", OTEL_BSP_MAX_EXPORT_BATCH_SIZE=str(batch_size),
    )  # fmt: skip
    if arm == "distro":
        from opentelemetry.instrumentation.auto_instrumentation import initialize

        initialize()
    import codegen.otel_runtime as otel
    from codegen.otel_runtime import _lean_recorder, _lean_span
    from codegen.otel_runtime._lean_span import recycle

    draw_ids = getattr(_lean_span, "draw_ids", None)  # a runtime before the encoder drew them

    otel.configure()
    (recorder,) = [
        r for r in otel._state.PROCESS.run.processors if isinstance(r, _lean_recorder.LeanRecorder)
    ]
    recorder.wake = threading.Event()  # the export thread waits on the old one: held back
    scope = {
        "otel": otel, "step": step, "recorder": recorder, "draw_ids": draw_ids, "recycle": recycle,
        "n": steps,
    }  # fmt: skip
    # an encoder that draws the batch's span ids itself: they are counted in encode
    scope["draws"] = getattr(recorder.encoder, "draws_ids", False)
    # as many steps as are counted and their export first (caches, the connection, the spans
    # recycle keeps for the training thread to start again, as a process's export thread keeps
    # them: its steady state), not counted
    exec("for _ in range(n):\n    step(otel, 0.0)\nrecorder._drain(None)", scope)  # noqa: S102
    codes = {
        "warm": "pass",
        "off": "for _ in range(n):\n    step(off, 0.0)",
        "record": "for _ in range(n):\n    step(otel, 0.0)",
        "take": (
            "batches = []\nwhile True:\n    b = recorder._take()\n    if not b:\n        break\n"
            "    draws or draw_ids(b)\n    batches.append(b)"
        ),
        "encode": "data = [recorder.encoder.encode(b)[0] for b in batches]",
        "send": "sent = [recorder.send(d) for d in data]",
        "free": "for b in batches:\n    recycle(b)\ndel b, batches, data",
    }

    class Off:  # the groups off: the call sites' flags read False
        STEP = FORWARD_BACKWARD = MICROBATCH = LAYER = False

    scope["off"] = Off
    for part in PARTS:
        exec("pass", {})  # noqa: S102  # its dump closes what came before
        exec(compile(codes[part], part, "exec"), scope)  # noqa: S102
    ok = all(scope["sent"])
    otel.reset()
    receiver.__exit__(None, None, None)
    json.dump({"spans": steps * 786, "sent": ok}, sys.stdout)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--arm", default="lean", choices=("lean", "distro"))
    parser.add_argument("--batch-size", type=_positive, default=512, help="spans a request (default: 512)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.steps, options.arm, options.batch_size)
        return
    with tempfile.TemporaryDirectory(prefix="otel-callgrind-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
        env["PYTHONPATH"] = str(REPO)
        command = [
            "valgrind", "--tool=callgrind", "--dump-after=builtin_exec", "--dump-instr=no",
            f"--callgrind-out-file={tmp}/cg", sys.executable, str(HERE / "record_instructions.py"),
            "--worker", "--steps", str(options.steps), "--arm", options.arm,
            "--batch-size", str(options.batch_size),
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        result = json.loads(proc.stdout)
        totals = callgrind_totals(Path(tmp))
    # the last 2 x len(PARTS) dumps: exec("pass"), then the part
    counted = dict(zip(PARTS, totals[-2 * len(PARTS) :][1::2], strict=True))
    spans = result["spans"]
    per = {part: (counted[part] - counted["warm"]) / spans for part in PARTS if part != "warm"}
    record = per["record"] - per["off"]
    export = per["take"] + per["encode"] + per["send"] + per["free"]
    lines = [
        (
            f"instructions per span (callgrind, one thread, {options.steps} steps of 786 spans, "
            f"arm {options.arm}, {options.batch_size} spans a request; "
            f"requests sent: {result['sent']})"
        ),
        f"record (training thread, arm - off): {record:,.0f}",
        (
            f"export: take + ids {per['take']:,.0f}, encode {per['encode']:,.0f}, "
            f"send {per['send']:,.0f}, free {per['free']:,.0f}; in all {export:,.0f}"
        ),
    ]
    print_table(lines, options.out)


if __name__ == "__main__":
    main()
