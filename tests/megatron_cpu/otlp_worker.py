"""The instrumented fork exporting through the runtime's real OTLP path; a subprocess of the tests.

    python otlp_worker.py train --out FILE --port P [--steps N] [--evaluate] [--phases A,B,...]
                                [--end normal|exception|sigterm] [--recording lean|sdk|program|distro]
    python otlp_worker.py spans --out FILE --count N [--more M] [--end ...] [--recording lean|distro]
    python otlp_worker.py chatter --out FILE --count N

Telemetry is configured the way a production job configures it: ``otel.configure(args)`` with
nothing but the environment the test sets (``MEGATRON_OTEL_ENABLED=1``,
``MEGATRON_OTEL_EXPORTER=otlp``, the standard ``OTEL_EXPORTER_OTLP_*`` variables pointing at the
test's receiver, ``OTEL_SERVICE_NAME``, SLURM identity); the runtime builds its own providers,
batch processors, metric reader and OTLP exporters, and flushes at exit through its own exit hooks.

``train``: megatron's global state as in ``megatron_training_worker.py``; ``otel.configure(args)``
and ``otel.startup(...)`` as ``pretrain()`` calls them; then ``train_step`` (megatron's, on the
tiny GPT in megatron's DDP with megatron's optimizer) runs inside the runtime calls that
``train()``'s generated instrumentation makes around it (``begin_training``, ``train_iteration``, the
``megatron.train.iteration`` / ``first_iteration`` spans, ``training_log``'s ``record_metrics``):
``train()`` itself needs CUDA. Each iteration is timed (wall clock, and the training thread's CPU time), telemetry calls
included. ``--evaluate`` runs
``megatron.training.training.evaluate`` once, inside the training interval as ``train()`` does.

``--phases``: the steps run in phases; before each the worker prints ``PHASE <name>`` and waits
for a line on stdin (the test switches its receiver's mode meanwhile), then runs ``--steps`` steps
and for at least ``--phase-seconds``, so one process measures every mode against the same model
and exporter. During each phase's steps a profile hook on the training thread (``ExportWatch``)
counts every call it makes into export code (the OTLP exporters, their HTTP/gRPC transports, the
runtime's export methods, ``time.sleep``), and every OTLP/HTTP request is recorded with the
thread that sent it: what the tests assert instead of step times, which a loaded machine stretches.

``spans``: no model; ``--count`` spans as fast as the runtime takes them (a long run with the
collector away, compressed), sampling this process's resident memory and the span queue; with
``--more``, prints ``HALF``, waits for a line on stdin, then records ``--more`` spans (numbered from
1,000,000), prints ``MORE`` and waits for another line before it ends: the test brings its
receiver back meanwhile and watches the later spans arrive while the run goes on.

``--end``: ``normal`` (returns), ``exception`` (an exception escapes the script) or ``sigterm``
(prints ``WAITING`` and sleeps until the test sends SIGTERM). ``END <epoch seconds>`` is printed
when the script's own work is done and ``EXITED <epoch seconds>`` by an exit hook that runs after
the runtime's, so the test measures how long the runtime's exit takes.

``chatter``: says ``--count`` ``EXITED`` lines (and prints each on stdout too, as the protocol used
to) while another thread logs without pause.

The protocol lines (``PHASE``, ``HALF``, ``MORE``, ``WAITING``, ``END``, ``EXITED``) go to the file
descriptor ``--protocol-fd`` names (a pipe only they use; stdout without it), each line one
``os.write`` of a few bytes: stdout and stderr carry logs that other threads write at any time (the
exporter's own "Transient error ..." lines), and a ``print`` is two writes that such a line can
split.
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import signal
import sys
import time
from typing import Any

PROCESS_START = time.time()


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def queued_spans(otel: Any) -> int:
    """Spans waiting in the runtime's batch span processors (the runtime's own measure)."""
    return max(otel._export.span_queue_lengths(otel._state.PROCESS.run.processors), default=-1)


PROTOCOL_FD = 1  # --protocol-fd


def say(line: str) -> None:
    """One protocol line, written whole (a pipe writes up to PIPE_BUF bytes atomically)."""
    if PROTOCOL_FD == 1:
        sys.stdout.flush()
    os.write(PROTOCOL_FD, (line + "\n").encode("ascii"))


def wait_for_go(label: str) -> None:
    say(label)
    if not sys.stdin.readline():
        raise SystemExit("stdin closed")


def end(how: str, results: dict[str, Any], out: str) -> None:
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(results, handle)
    if how == "sigterm":
        say("WAITING")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise SystemExit("no SIGTERM came")
    say(f"END {time.time():.6f}")
    if how == "exception":
        raise RuntimeError("the training script failed (injected by the test)")


def set_recording(otel: Any, recording: str, args: Any) -> None:
    """``lean``: as the runtime decides (its own providers: the lean path); ``sdk``: its own
    providers on the SDK path; ``program``: a global TracerProvider the program sets (batch span
    processor, OTLP/HTTP exporter, the resource the runtime would build), which the runtime uses;
    ``distro``: the global providers ``opentelemetry-instrument`` set from the ``OTEL_*``
    variables (the worker runs under it; ``MEGATRON_OTEL_RECORDING`` chooses the path)."""
    if recording == "sdk":
        otel._lean_install.ALLOWED = False
    elif recording == "distro":  # run under opentelemetry-instrument: the distro set it up
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        if type(trace.get_tracer_provider()) is not TracerProvider:
            raise SystemExit("--recording distro: run the worker under opentelemetry-instrument")
    elif recording == "program":
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create(
            {**otel.resource_attributes(args), "service.name": os.environ["OTEL_SERVICE_NAME"]}
        )
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)


# Code only an export thread may run: a training thread that calls into it waits on the export.
_EXPORT_CODE = (
    "/opentelemetry/exporter/",
    "/requests/",
    "/urllib3/",
    "/grpc/",
    "/http/client.py",
    "/socket.py",
    "/ssl.py",
)
# The runtime's export methods (the batching core ``_batching`` and its users ``_batch`` and ``_lean_recorder``;
# ``_otlp`` when present), by name.
_EXPORT_METHODS = frozenset(("_export", "_drain", "_work", "_run", "_send", "force_flush"))
_EXPORT_FILES = ("_batching.py", "_batch.py", "_lean_recorder.py", "_otlp.py")


class ExportWatch:
    """Counts, per phase, what the training thread runs of the export: calls into export code,
    ``time.sleep`` calls; and records which threads sent the OTLP/HTTP requests.

    A collection of the cyclic garbage collector runs the finalizers of whatever it frees in the
    thread that triggered it: a response the export thread dropped inside a cycle (a timed-out
    request's traceback holds it) is finalized wherever the next collection happens, the training
    thread too (``HTTPResponse.closed``). Those calls are the collector's, not the export's: kept
    apart in ``collected``."""

    def __init__(self) -> None:
        import gc
        import threading

        import requests

        self.calls: dict[str, list[str]] = {}
        self.collected: dict[str, list[str]] = {}
        self.export_threads: dict[str, int] = {}
        self.phase = ""
        self.collecting = False
        self.thread = threading.get_ident()

        def collection(phase: str, info: dict[str, int]) -> None:
            if threading.get_ident() == self.thread:
                self.collecting = phase == "start"

        gc.callbacks.append(collection)

        original = requests.Session.send

        def send(session: Any, request: Any, **options: Any) -> Any:
            name = threading.current_thread().name
            self.export_threads[name] = self.export_threads.get(name, 0) + 1
            return original(session, request, **options)

        requests.Session.send = send  # every OTLP/HTTP request, whichever path encoded it

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            path = code.co_filename
            if any(part in path for part in _EXPORT_CODE) or (
                code.co_name in _EXPORT_METHODS and path.endswith(_EXPORT_FILES)
            ):
                found = self.collected if self.collecting else self.calls
                found.setdefault(self.phase, []).append(f"{path}:{code.co_name}")
        elif event == "c_call" and arg is time.sleep:
            self.calls.setdefault(self.phase, []).append("time.sleep")

    def start(self, phase: str) -> None:
        self.phase = phase
        self.calls.setdefault(phase, [])
        sys.setprofile(self._profile)

    def stop(self) -> None:
        sys.setprofile(None)


def tracer_type(otel: Any) -> str:
    """The class of the tracer the runtime records with (LeanTracer: the lean path)."""
    state = otel._state
    run = state.PROCESS.run if hasattr(state, "PROCESS") else state.STATE
    return type(run.tracer).__name__


def main_train(options: argparse.Namespace) -> None:
    import megatron_training_worker as training_worker
    import torch
    import torch.distributed as dist
    from megatron.core import otel, parallel_state
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.training import training

    base = training_worker.base
    args = training_worker.init_megatron(options.port)
    set_recording(otel, options.recording, args)
    groups = sorted(otel.configure(args))
    otel.startup(
        {
            "program_start": PROCESS_START,
            "main_entry": PROCESS_START + 0.01,
            "pretrain_entry": PROCESS_START + 0.02,
            "initialize_megatron": time.time(),
        },
        lambda: {"megatron.model_type": "ModelType.encoder_or_decoder"},
    )
    results: dict[str, Any] = {"groups": groups, "phases": {}, "losses": [], "tracer": tracer_type(otel)}
    data = itertools.cycle(training_worker.make_batches(4 * base.NUM_MICROBATCHES, base.SEED + 20))
    try:
        with training_worker.cpu_shims():
            model, ddp, optimizer, scheduler = training_worker.build_trainer()
            config = model.config
            forward_backward = get_forward_backward_func()
            phases = options.phases.split(",") if options.phases else ["run"]
            watch = ExportWatch() if options.phases else None
            iteration = 0
            otel.begin_training(iteration, options.save_interval)
            if options.evaluate:  # train() evaluates inside the training interval
                batches = training_worker.make_batches(
                    training_worker.EVAL_ITERS * base.NUM_MICROBATCHES, base.SEED + 10
                )
                training.evaluate(base.forward_step_func, iter(batches), [model], None, config)
            for phase in phases:
                if options.phases:
                    wait_for_go(f"PHASE {phase}")
                times = results["phases"].setdefault(phase, [])
                cpu = results.setdefault("cpu", {}).setdefault(phase, [])
                phase_ends = time.monotonic() + options.phase_seconds
                while len(times) < options.steps or time.monotonic() < phase_ends:
                    watch and watch.start(phase)
                    started, cpu_started = time.perf_counter(), time.thread_time()
                    otel.train_iteration(iteration)
                    step = otel.STEP and otel.start_span(
                        "megatron.train.iteration", lambda: {"megatron.iteration": iteration}
                    )
                    first = (
                        otel.FIRST_ITERATION
                        and otel.first_time("megatron.train.first_iteration")
                        and otel.start_span(
                            "megatron.train.first_iteration", lambda: {"megatron.iteration": iteration}
                        )
                    )
                    loss, skipped, _c, _e, _x, grad_norm, _z, _l = training.train_step(
                        base.forward_step_func,
                        data,
                        [ddp],
                        optimizer,
                        scheduler,
                        config,
                        forward_backward,
                        iteration=iteration,
                    )
                    first and first.end()
                    step and step.set_attributes(lambda: {"megatron.skipped": skipped})
                    step and step.end()
                    elapsed = time.perf_counter() - started
                    lm_loss = loss["lm loss"]
                    otel.METRICS and otel.record_metrics(
                        lambda: {
                            "megatron.training.step_duration_ms": elapsed * 1000.0,
                            "megatron.training.loss": otel.interval_loss(
                                {"lm loss": lm_loss, "iters": 1}, "iters"
                            ),
                            "megatron.training.tokens_per_sec": (
                                training_worker.GLOBAL_BATCH * base.SEQ / elapsed
                            ),
                            "megatron.training.grad_norm": grad_norm,
                            "megatron.training.skipped_iters": skipped,
                            "megatron.training.learning_rate": scheduler.get_lr(optimizer.param_groups[0]),
                            "megatron.training.memory_allocated_gb": otel.max_memory_allocated_gb(),
                        }
                    )
                    times.append(time.perf_counter() - started)
                    cpu.append(time.thread_time() - cpu_started)
                    watch and watch.stop()
                    results["losses"].append(float(lm_loss))
                    iteration += 1
            otel.end_training()
            if watch:
                results["training_thread_export_calls"] = watch.calls
                results["export_threads"] = watch.export_threads
                results["training_thread_collected_calls"] = watch.collected
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    results["iterations"] = iteration
    del torch
    end(options.end, results, options.out)


def main_spans(options: argparse.Namespace) -> None:
    from megatron.core import otel

    set_recording(otel, options.recording, None)
    results: dict[str, Any] = {"groups": sorted(otel.configure()), "tracer": tracer_type(otel)}
    otel.METRICS and otel.record_metrics(lambda: {"megatron.training.loss": 2.5})
    rss = [rss_bytes()]
    queued: list[int] = []
    every = max(1, options.count // 20)

    def record(count: int, offset: int) -> None:
        for index in range(count):
            span = otel.STEP and otel.start_span(
                "megatron.train.iteration", lambda: {"megatron.iteration": offset + index}
            )
            span and span.end()
            if index % every == every - 1:
                rss.append(rss_bytes())
                queued.append(queued_spans(otel))

    started = time.perf_counter()
    record(options.count, 0)
    results["seconds"] = time.perf_counter() - started
    results["rss"] = rss
    results["queued"] = queued
    if options.more:
        wait_for_go("HALF")
        record(options.more, 1_000_000)
        wait_for_go("MORE")
    end(options.end, results, options.out)


def main_chatter(options: argparse.Namespace) -> None:
    """The protocol beside a busy logger: another thread logs as the exporter does when the
    collector is away, while this one says ``--count`` timestamped lines."""
    import logging
    import threading

    log = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    done = threading.Event()

    def chatter() -> None:
        while not done.is_set():
            log.warning("Transient error encountered while exporting span batch, retrying in 1s.")

    thread = threading.Thread(target=chatter, daemon=True)
    thread.start()
    for _ in range(options.count):
        say(f"EXITED {time.time():.6f}")
        print(f"EXITED {time.time():.6f}", flush=True)  # the old way, on stdout
    done.set()
    thread.join()
    end(options.end, {}, options.out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train")
    train.add_argument("--port", type=int, required=True)
    train.add_argument("--steps", type=int, default=3)
    train.add_argument("--evaluate", action="store_true")
    train.add_argument("--phases", default="")
    train.add_argument("--phase-seconds", type=float, default=0.0)
    train.add_argument("--save-interval", type=int, default=2)
    train.add_argument("--recording", choices=("lean", "sdk", "program", "distro"), default="lean")
    spans = sub.add_parser("spans")
    spans.add_argument("--count", type=int, required=True)
    spans.add_argument("--more", type=int, default=0)
    spans.add_argument("--recording", choices=("lean", "distro"), default="lean")
    chatter = sub.add_parser("chatter")
    chatter.add_argument("--count", type=int, required=True)
    for command in (train, spans, chatter):
        command.add_argument("--out", required=True)
        command.add_argument("--end", choices=("normal", "exception", "sigterm"), default="normal")
        command.add_argument("--protocol-fd", type=int, default=1)
    options = parser.parse_args(argv)
    global PROTOCOL_FD
    PROTOCOL_FD = options.protocol_fd
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # Registered before the runtime's exit hook, so it runs after it (atexit is last in, first out).
    atexit.register(lambda: say(f"EXITED {time.time():.6f}"))
    if options.command == "train":
        import torch

        torch.set_num_threads(1)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        main_train(options)
    elif options.command == "chatter":
        main_chatter(options)
    else:
        main_spans(options)


if __name__ == "__main__":
    main()
