"""What telemetry costs the whole training process at the ``all`` load of a real step, export
included and running during the steps; prints JSON.

    python benchmarks/process_worker.py [--rounds N] [--steps N] [--step-s S]

No model: a step is the span pattern of a GPT of 32 layers and 8 microbatches under ``all``
(``megatron.train.iteration`` > ``...forward_backward`` > per microbatch ``megatron.microbatch.forward``
with 32 x ``megatron.layer.forward`` > ``self_attention`` + ``mlp``, and ``megatron.microbatch.backward``:
786 spans), recorded through the statement sites' calls (``otel.LAYER and otel.start_span(name)``,
``.end()``), and after each layer and in each backward the training thread waits as it waits for
a GPU (``time.sleep``: the GIL released; ``--step-s`` per step in all, 1 s by default). Telemetry is configured as a job
configures it (``MEGATRON_OTEL_*``, ``configure()``: the runtime's own providers, OTLP/HTTP to the
tests' live receiver in a child process, the default batch size of 512 and schedule delay of 5 s):
a batch is exported as soon as 512 spans are buffered, one and a half a step, while the steps run. Arms, one run each per round in a shuffled order: ``off`` (the same loop, the
same set-up, reset before the steps: the groups off), ``sdk`` (the SDK path: ``_lean_install.ALLOWED`` off), ``lean_readable`` (the lean path
handing ``ReadableSpan`` s to the exporter, as before ``_otlp``), ``lean`` (the lean path as it
is), and on the provider ``opentelemetry-instrument`` sets up: ``distro`` (the lean path through
its exporter) and ``distro_sdk`` (its SDK path, ``MEGATRON_OTEL_RECORDING=sdk``). For those the
worker sets the global providers up once, at its start, as ``opentelemetry-instrument`` does
(``opentelemetry.instrumentation.auto_instrumentation.initialize()``: the distro and the SDK's
configurator from ``OTEL_TRACES_EXPORTER=otlp`` and the receiver's ``OTEL_EXPORTER_OTLP_*``), and
their runs use it (``MEGATRON_OTEL_OWN_PROVIDERS=0``); the other arms build the runtime's own. A run: ``configure()``, one step not measured (the export reaches its steady state), then
``--steps`` measured steps, then ``reset()`` (not measured). Per run: the training thread's CPU
time (``time.thread_time``), the CPU time of every other thread of the process
(``time.process_time`` minus the training thread's: the export thread and anything else
telemetry runs), the wall time, and the spans recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = ("off", "sdk", "lean_readable", "lean", "distro", "distro_sdk")
DISTRO_ARMS = ("distro", "distro_sdk")
LAYERS, MICROBATCHES = 32, 8
SPANS_PER_STEP = 2 + MICROBATCHES * (2 + 3 * LAYERS)  # 786


def step(otel, pause: float, sleep: Callable[[float], None] = time.sleep) -> None:
    """One step's spans, as the statement sites record them; ``pause`` between the layer parts
    (``sleep``'s: ``pause_sweep.py`` passes one that counts the CPU inside it)."""
    iteration = otel.STEP and otel.start_span("megatron.train.iteration", lambda: {"megatron.iteration": 1})
    fb = otel.FORWARD_BACKWARD and otel.start_span("megatron.train.iteration.forward_backward")
    for _ in range(MICROBATCHES):
        forward = otel.MICROBATCH and otel.start_span("megatron.microbatch.forward")
        for layer_number in range(LAYERS):
            layer = otel.LAYER and otel.start_span(
                "megatron.layer.forward", lambda n=layer_number: {"megatron.layer_number": n}
            )
            attention = otel.LAYER and otel.start_span("megatron.layer.self_attention")
            attention and attention.end()
            mlp = otel.LAYER and otel.start_span("megatron.layer.mlp")
            mlp and mlp.end()
            layer and layer.end()
            sleep(pause)
        forward and forward.end()
        backward = otel.MICROBATCH and otel.start_span("megatron.microbatch.backward")
        sleep(pause * LAYERS)
        backward and backward.end()
    fb and fb.end()
    iteration and iteration.end()


def set_up(otel, arm: str) -> None:
    try:
        from codegen.otel_runtime import _lean_install
    except ImportError:  # a runtime from before the split (PYTHONPATH=an older checkout)
        from codegen.otel_runtime import _lean as _lean_install

    try:
        from codegen.otel_runtime import _otlp
    except ImportError:  # a runtime from before _otlp (PYTHONPATH=an older checkout)
        _otlp = None
    os.environ["MEGATRON_OTEL_SPAN_GROUPS"] = "all"
    os.environ["OTEL_SERVICE_NAME"] = f"process-{arm}"  # the distro's resource has its own
    os.environ["MEGATRON_OTEL_OWN_PROVIDERS"] = "0" if arm in DISTRO_ARMS else "1"
    os.environ["MEGATRON_OTEL_RECORDING"] = "sdk" if arm == "distro_sdk" else "auto"
    _lean_install.ALLOWED = arm != "sdk"
    if _otlp is not None:
        _otlp.ENABLED = arm in ("lean", "distro")
    otel.configure()
    if arm == "off":  # the same set-up work, ended before the steps
        otel.reset()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=2, help="measured steps per run")
    parser.add_argument("--step-s", type=float, default=1.0, help="the training thread's waits per step")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of " + ", ".join(ARMS))
    options = parser.parse_args()
    arms_run = [arm for arm in options.arms.split(",") if arm]
    unknown = sorted(set(arms_run) - set(ARMS))
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}")
    sys.path.append(str(REPO))  # after PYTHONPATH: an older runtime can be measured
    from benchmarks.receiver import ReceiverProcess

    receiver = ReceiverProcess("http").__enter__()
    os.environ.update(receiver.environ)
    os.environ.update(
        MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_EXPORTER="otlp", MEGATRON_OTEL_METRICS_ENABLED="0",
        MEGATRON_OTEL_OWN_PROVIDERS="1",
    )  # fmt: skip
    # the global providers, as opentelemetry-instrument sets them up before the program runs
    os.environ.update(
        OTEL_SERVICE_NAME="process-distro", OTEL_TRACES_EXPORTER="otlp", OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )  # fmt: skip
    from opentelemetry.instrumentation.auto_instrumentation import initialize

    initialize()
    import codegen.otel_runtime as otel

    pause = options.step_s / (MICROBATCHES * 2 * LAYERS)  # one per layer, a forward's worth per backward
    order = random.Random(0)
    runs: dict[str, dict[str, list[float]]] = {
        arm: {"thread_cpu_s": [], "other_cpu_s": [], "wall_s": []} for arm in arms_run
    }
    for _ in range(options.rounds):
        arms = list(arms_run)
        order.shuffle(arms)
        for arm in arms:
            set_up(otel, arm)
            step(otel, pause)
            process, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
            for _ in range(options.steps):
                step(otel, pause)
            wall, thread = time.perf_counter() - wall, time.thread_time() - thread
            other = time.process_time() - process - thread
            otel.reset()
            runs[arm]["thread_cpu_s"].append(thread / options.steps)
            runs[arm]["other_cpu_s"].append(other / options.steps)
            runs[arm]["wall_s"].append(wall / options.steps)
    counts = receiver.counts()
    receiver.__exit__(None, None, None)
    recorded = {arm: sum(counts.get(f"process-{arm}", {}).values()) for arm in arms_run}
    distro = [arm for arm in DISTRO_ARMS if arm in arms_run]
    for arm in distro:  # one global provider, one resource: the distro arms' spans together
        recorded[arm] = sum(counts.get("process-distro", {}).values()) / len(distro)
    runs_per_arm = options.rounds
    print(
        json.dumps(
            {
                "rounds": options.rounds,
                "steps": options.steps,
                "step_s": options.step_s,
                "pause_s": pause,  # the wait after each layer
                "spans_per_step": {arm: 0 if arm == "off" else SPANS_PER_STEP for arm in arms_run},
                # every run records (1 + steps) steps; the receiver's count checks that all arrived
                "received_per_step": {
                    arm: recorded[arm] / (runs_per_arm * (1 + options.steps)) for arm in arms_run
                },
                "python": sys.version.split()[0],
                "load": f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
