"""Cost of telemetry per training step: megatron.training's real ``train_step`` on CPU, timed
with telemetry off, ``default`` and ``all`` interleaved in one process, recorded as a job records
them: through the runtime's own providers, exporting over OTLP/HTTP to a live receiver; prints JSON.

    PYTHONPATH=FORK python benchmarks/step_worker.py --shape tiny|layer --rounds N --port P

``FORK`` is the instrumented megatron-core (``codegen apply specs/ --out FORK``). The model,
data, ``forward_step_func``, Megatron's global state, DDP wrapper and optimizer are those of the
runtime tests (``tests/megatron_cpu/megatron_training_worker.py``, with its CPU redirects). Every
round runs one ``train_step`` per arm in a shuffled order: ``off`` (telemetry off during the step:
the arm configures and resets telemetry before it, the same set-up work and garbage as the other
arms), a second ``off`` (the noise floor: how far two identical arms drift apart), ``default``, ``all``
(the SDK path), ``all_urandom`` (the SDK path with the runtime's previous id generator, a
``os.urandom`` call per id: what the per-process generator saves), ``lean`` (``all`` on the
lean path, when the runtime has one) and ``sdk_own`` (``all`` with the SDK's own span at each call
site in place of the runtime's: ``OwnSdk``; what the SDK path is compared with). A telemetry arm
is set up as a job sets it up, outside the timed region: ``MEGATRON_OTEL_*`` variables and
``otel.configure()``, which builds the runtime's own ``TracerProvider``, its bounded batch span
processor (or the lean recorder) and the OTLP/HTTP exporter pointed at the tests' receiver
(``tests/megatron_cpu/otlp_receiver.py``, in a child process: its decoding is not counted); after
the step ``otel.reset()`` exports what the step recorded (the end of a run). Each arm reports the
step's wall time and the training thread's CPU time (``time.thread_time``), and the process's
other CPU from the step's start to the end of that export (the export thread and the flush: the
export CPU). Spans per step are counted by the receiver (each arm exports under its own
``service.name``).

The SDK's own cost to record one span (``with tracer.start_as_current_span(name,
attributes={"megatron.span_group": ...}): pass``, a span made current as nesting needs) through the
same production provider, two ways: in a tight loop (caches warm), and in place: the arms ``probe``
(``all``, SDK path) and ``probe_lean`` (``all``, lean path), their step times not reported, wrap
``otel.start_span`` and time every span the runtime records next to one bare SDK span recorded at
the same moment, the order alternating, so both pay the same cold caches between torch kernels;
an empty timed region beside them measures the timing's own cost in place (a runtime span is
timed in two regions, its start and its end; an SDK span in one), which the report subtracts.

Shapes: ``tiny`` is the runtime tests' GPT (2 layers, hidden 64, seq 16, 2 microbatches of 2);
``layer`` has layers shaped like a real model's (hidden 1024, 16 heads, seq 1024, 2 layers,
2 microbatches of 1).
"""

from __future__ import annotations

import argparse
import gc
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
ARMS = ("off", "off2", "default", "all", "all_urandom", "lean", "sdk_own")
PROBES = ("probe", "probe_lean")
TIMED = ARMS + PROBES
# arm -> (span groups, lean path)
TELEMETRY = {
    "default": ("default", False),
    "all": ("all", False),
    "all_urandom": ("all", False),
    "lean": ("all", True),
    "sdk_own": ("all", False),
    "probe": ("all", False),
    "probe_lean": ("all", True),
}
PROBE_NAME = "megatron.probe"


class Probe:
    """Wraps ``otel.start_span``: times each runtime span (start + end) and a bare SDK span beside it."""

    def __init__(self, otel, tracer) -> None:
        self.otel, self.tracer, self.start_span = otel, tracer, otel.start_span
        self.runtime_s = self.sdk_s = self.runtime_cpu_s = self.sdk_cpu_s = 0.0
        self.clock_s = self.clock_cpu_s = 0.0  # empty timed regions: the timing's own cost
        self.spans = 0

    def empty_region(self) -> None:
        start, cpu = time.perf_counter(), time.thread_time()
        self.clock_cpu_s += time.thread_time() - cpu
        self.clock_s += time.perf_counter() - start

    def sdk_span(self) -> None:
        start, cpu = time.perf_counter(), time.thread_time()
        with self.tracer.start_as_current_span(PROBE_NAME, attributes={"megatron.span_group": "layer"}):
            pass
        self.sdk_cpu_s += time.thread_time() - cpu
        self.sdk_s += time.perf_counter() - start

    def __call__(self, *args, **kwargs):
        sdk_first = self.spans % 2 == 0
        if sdk_first:
            self.sdk_span()
        start, cpu = time.perf_counter(), time.thread_time()
        span = self.start_span(*args, **kwargs)
        self.runtime_cpu_s += time.thread_time() - cpu
        self.runtime_s += time.perf_counter() - start
        self.spans += 1
        if not sdk_first:
            self.sdk_span()
        self.empty_region()
        return _Timed(self, span) if span else span


class OwnSdk:
    """Stands in for ``otel.start_span`` in the ``sdk_own`` arm: the SDK's own span at each call
    site, as ``start_as_current_span`` makes one (``tracer.start_span``, then made current), with
    the attributes the runtime gives it, through the same production provider; the runtime's own
    code not involved. What the SDK itself adds to a step, measured as the runtime's arms are."""

    def __init__(self, tracer, attributes) -> None:
        from opentelemetry import context, trace

        self.tracer, self.attributes = tracer, attributes
        self.attach, self.detach, self.current = context.attach, context.detach, trace.set_span_in_context

    def __call__(self, name, attributes=None):
        values = dict(self.attributes.get(name, ()))
        if attributes is not None:
            values.update(attributes())
        span = self.tracer.start_span(name, attributes=values)
        return _OwnSpan(self, span, self.attach(self.current(span)))


class _OwnSpan:
    __slots__ = ("own", "span", "token")

    def __init__(self, own: OwnSdk, span, token) -> None:
        self.own, self.span, self.token = own, span, token

    def set_attributes(self, attributes):
        self.span.set_attributes(attributes())

    def end(self) -> None:
        self.own.detach(self.token)
        self.span.end()


class _Timed:
    __slots__ = ("probe", "span")

    def __init__(self, probe: Probe, span) -> None:
        self.probe, self.span = probe, span

    def set_attributes(self, attributes):
        return self.span.set_attributes(attributes)

    def end(self) -> None:
        start, cpu = time.perf_counter(), time.thread_time()
        self.span.end()
        self.probe.runtime_cpu_s += time.thread_time() - cpu
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


def sdk_span_cost(otel, spans: int = 2000, rounds: int = 15) -> float:
    """Median seconds for the SDK alone to start and end one recorded span (with the group
    attribute), through the production provider of an ``all`` run (SDK path)."""
    samples = []
    for _ in range(rounds):
        set_up(otel, "probe")
        tracer = owned_provider().get_tracer("bench")
        start = time.perf_counter()
        for _ in range(spans):
            with tracer.start_as_current_span(PROBE_NAME, attributes={"megatron.span_group": "layer"}):
                pass
        samples.append((time.perf_counter() - start) / spans)
        otel.reset()
    return statistics.median(samples)


def owned_provider():
    """The TracerProvider the runtime built for this run."""
    from megatron.core.otel import _state

    holder = getattr(_state, "PROCESS", None)
    owned = holder.run.owned if holder is not None else _state.STATE.owned
    return next(p for p in owned if hasattr(p, "get_tracer"))


def run_tracer():
    """The tracer this run's spans start from."""
    from megatron.core.otel import _state

    holder = getattr(_state, "PROCESS", None)
    return holder.run.tracer if holder is not None else _state.STATE.tracer


class UrandomIds:
    """The runtime's previous id generator: ``os.urandom`` for every id (a system call each)."""

    def generate_span_id(self) -> int:
        return int.from_bytes(os.urandom(8), "big") or 1

    def generate_trace_id(self) -> int:
        return int.from_bytes(os.urandom(16), "big") or 1

    def is_trace_id_random(self) -> bool:
        return False


def lean_module():
    try:
        from megatron.core.otel import _lean_install
    except ImportError:
        return None
    return _lean_install


def set_up(otel, arm: str) -> None:
    """Configure telemetry for ``arm`` as a job does: environment variables, ``configure()``."""
    groups, lean = TELEMETRY[arm]
    os.environ.update(
        MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_SPAN_GROUPS=groups, MEGATRON_OTEL_EXPORTER="otlp",
        MEGATRON_OTEL_METRICS_ENABLED="0", OTEL_SERVICE_NAME=f"bench-{arm}",
    )  # fmt: skip
    module = lean_module()
    if module is not None:
        module.ALLOWED = lean
    otel.configure()
    if arm == "all_urandom":  # the SDK path as it was: a system call per id
        run_tracer().id_generator = UrandomIds()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--captures", type=Path, help="write each arm's received spans here (OTLP JSON)")
    options = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.receiver import ReceiverProcess

    receiver = ReceiverProcess("http").__enter__()
    os.environ.update(receiver.environ)
    for key, value in SHAPES[options.shape].items():
        setattr(base, key, value)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")

    from megatron.core import otel
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.otel._spans import SPAN_ATTRIBUTES  # what the runtime gives each span
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.training import training

    training_worker.init_megatron(options.port, megatron_argv())
    steps = options.warmup + options.rounds
    batches = training_worker.make_batches(base.NUM_MICROBATCHES, base.SEED + 20)
    has_lean = lean_module() is not None
    timed = [arm for arm in TIMED if has_lean or arm not in ("lean", "probe_lean")]
    times: dict[str, list[float]] = {arm: [] for arm in timed}
    cpu: dict[str, list[float]] = {arm: [] for arm in timed}
    export_cpu: dict[str, list[float]] = {arm: [] for arm in timed}
    probes = {arm: Probe(otel, None) for arm in PROBES if arm in timed}
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
        start_span = otel.start_span
        for step in range(steps):
            arms = list(timed)
            order.shuffle(arms)
            for arm in arms:
                if arm in TELEMETRY:
                    set_up(otel, arm)
                else:  # the same set-up work as a telemetry arm, ended before the step
                    set_up(otel, "all")
                    otel.reset()
                probe = probes.get(arm)
                if probe is not None and step >= options.warmup:
                    probe.tracer = owned_provider().get_tracer("bench")
                    # what the call sites reach now (a lean run's own tracer.open)
                    probe.start_span = otel.start_span
                    otel.start_span = probe
                if arm == "sdk_own":
                    otel.start_span = OwnSdk(run_tracer(), SPAN_ATTRIBUTES)
                data = iter(batches)
                gc.collect()  # what configure() allocated is not collected inside the timed step
                process = time.process_time()
                start, thread = time.perf_counter(), time.thread_time()
                training.train_step(
                    base.forward_step_func, data, [ddp], optimizer, scheduler, model.config,
                    forward_backward, iteration=step,
                )  # fmt: skip
                elapsed, thread = time.perf_counter() - start, time.thread_time() - thread
                otel.start_span = start_span
                if arm in TELEMETRY:
                    otel.reset()  # the run's end: everything recorded is exported
                other = time.process_time() - process - thread
                if step >= options.warmup:
                    times[arm].append(elapsed)
                    cpu[arm].append(thread)
                    export_cpu[arm].append(other)
        sdk = sdk_span_cost(otel)
    counts = receiver.counts()
    if options.captures:
        options.captures.mkdir(parents=True, exist_ok=True)
        receiver.write_traces(options.captures / "all-arms.json")
    receiver.__exit__(None, None, None)
    spans = {
        arm: sum(n for name, n in counts.get(f"bench-{arm}", {}).items() if name != PROBE_NAME) / steps
        for arm in timed
    }
    spans.update(off=0, off2=0)
    print(
        json.dumps(
            {
                "shape": options.shape,
                "sizes": SHAPES[options.shape],
                "rounds": options.rounds,
                "python": sys.version.split()[0],
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "load": f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
                "recording": "runtime's own providers, OTLP/HTTP to a live receiver (batch export)",
                "median_s": {arm: statistics.median(times[arm]) for arm in timed if arm not in PROBES},
                "cpu_s": {arm: statistics.median(cpu[arm]) for arm in timed if arm not in PROBES},
                "export_cpu_s": {
                    arm: statistics.median(export_cpu[arm]) for arm in timed if arm not in PROBES
                },
                "times_s": times,
                "cpu_times_s": cpu,  # per round, in round order: every arm ran once per round
                "spans_per_step": spans,
                "sdk_span_s": sdk,
                **{
                    arm: {
                        "spans": probe.spans,
                        "runtime_span_s": probe.runtime_s / max(probe.spans, 1),
                        "sdk_span_s": probe.sdk_s / max(probe.spans, 1),
                        "runtime_span_cpu_s": probe.runtime_cpu_s / max(probe.spans, 1),
                        "sdk_span_cpu_s": probe.sdk_cpu_s / max(probe.spans, 1),
                        # one empty timed region: a runtime span is timed in two, an SDK one in one
                        "clock_s": probe.clock_s / max(probe.spans, 1),
                        "clock_cpu_s": probe.clock_cpu_s / max(probe.spans, 1),
                    }
                    for arm, probe in probes.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
