"""The real export path: the instrumented fork's runtime, configured for OTLP, to a live receiver.

Over the wire (OTLP/HTTP and OTLP/gRPC): the tiny GPT's evaluate and train steps
(``otlp_worker.py``) export through ``MEGATRON_OTEL_EXPORTER=otlp`` and the standard
``OTEL_EXPORTER_OTLP_*`` variables; what the receiver got passes ``codegen verify``, its metrics
carry their declared names and units, its resource the service name, rank and job.

Faults (OTLP/HTTP; the receiver slow, refusing, absent): the training thread never runs the export, exiting
(normal, exception, SIGTERM) with no collector takes at most the configured flush timeout plus a
second, the span queue stays bounded with drops counted and logged once, and export recovers when
the collector comes back. Bounds are asserted with wide margins (a shared CI machine); the figures
are printed (``pytest -s``) and written to ``$OTLP_FIGURES`` when set.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

for _module in (
    "torch",
    "opentelemetry.sdk.trace",
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
):
    pytest.importorskip(_module, reason=f"{_module} is needed for the OTLP export tests")

from tests.megatron_cpu.otlp_receiver import PROTOCOLS, OtlpReceiver
from tests.support.megatron_workers import SERVICE, Worker, distro_env, otel_env
from tests.support.paths import SPECS
from tests.support.ports import free_port

FLUSH_TIMEOUT_S = 2.0  # MEGATRON_OTEL_FLUSH_TIMEOUT_S in the fault runs
EXPORT_TIMEOUT_S = 1.0  # MEGATRON_OTEL_EXPORT_TIMEOUT_S in the fault runs
MAX_QUEUE = 512  # OTEL_BSP_MAX_QUEUE_SIZE in the queue run
FIGURES: dict[str, Any] = {}


def fault_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    """Short timeouts and a short batch delay: exports (and their failures) happen during the run."""
    settings = {
        "MEGATRON_OTEL_FLUSH_TIMEOUT_S": str(FLUSH_TIMEOUT_S),
        "MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S": str(FLUSH_TIMEOUT_S),
        "MEGATRON_OTEL_EXPORT_TIMEOUT_S": str(EXPORT_TIMEOUT_S),
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    return otel_env(receiver, **{**settings, **extra})


def figure(key: str, value: Any) -> None:
    FIGURES[key] = value
    print(f"otlp figure: {key} = {value}")
    path = os.environ.get("OTLP_FIGURES")
    if path:
        Path(path).write_text(json.dumps(FIGURES, indent=1, sort_keys=True) + "\n")


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: next(iter(item["value"].values()), None) for item in items}


def test_protocol_lines_stay_whole_while_other_threads_log(fork_root, tmp_path):
    """Every protocol line arrives whole while another thread of the worker logs without pause;
    the same lines printed on stdout, as the protocol used to send them, are split by the log
    lines when output is unbuffered (PYTHONUNBUFFERED), the race this pipe removes
    (``EXITED 1796444726.701580Transient error ...``): about 1 in 25 of them on a 2-core machine,
    printed as a figure (how often depends on scheduling)."""
    count = 2000
    worker = Worker(fork_root, ["chatter", "--count", str(count)], {"PYTHONUNBUFFERED": "1"}, tmp_path)
    times = [float(worker.expect("EXITED")[1].split()[1]) for _ in range(count)]
    worker.expect("END")
    assert worker.wait() == 0, worker.output()[-4000:]
    assert times == sorted(times)
    printed = [line for _, line in worker.lines if "EXITED" in line]
    split = [line for line in printed if not re.fullmatch(r"EXITED \d+\.\d{6}", line)]
    figure("protocol.printed_lines_split", len(split))  # a figure: how often depends on scheduling


# --------------------------------------------------------------------------------------------
# over the wire


@pytest.fixture(scope="module", params=PROTOCOLS)
def wire(request, fork_root: Path, tmp_path_factory) -> dict[str, Any]:
    """One CPU run exporting over ``request.param`` to an accepting receiver."""
    work = tmp_path_factory.mktemp(f"otlp-{request.param}")
    with OtlpReceiver(request.param) as receiver:
        args = ["train", "--port", str(free_port()), "--steps", "3", "--evaluate"]
        worker = Worker(fork_root, args, otel_env(receiver), work)
        code = worker.wait()
        assert code == 0, worker.output()[-4000:]
        # the runtime flushed at interpreter exit: everything is there once the worker is gone
        return {
            "protocol": request.param,
            "traces": receiver.write_traces(work / "traces.json"),
            "spans": receiver.spans(),
            "metrics": receiver.metrics(),
            "requests": receiver.requests(),
            "results": worker.results(),
            "output": worker.output(),
        }


def test_spans_arrive_over_otlp_and_codegen_verify_accepts_them(wire, capsys):
    from codegen.cli import main

    names = [span["name"] for span in wire["spans"]]
    assert names.count("megatron.train.iteration") == 3
    assert names.count("megatron.train") == 2  # save_interval 2: two training intervals
    assert names.count("megatron.evaluate") == 1 and names.count("megatron.startup") == 1
    assert {r.status for r in wire["requests"]} == {"ok"}
    assert {r.protocol for r in wire["requests"]} == {wire["protocol"]}
    capture = str(wire["traces"])
    # no unknown span, wrong group, wrong parent or missing attribute ...
    assert main(["verify", str(SPECS), capture, "--groups", ""]) == 0, capsys.readouterr().out
    # ... and every span of the groups this run exercises completely was seen
    groups = "evaluate,forward_backward,optimizer,microbatch"
    assert main(["verify", str(SPECS), capture, "--groups", groups]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert f"{len(names)} spans, " in out and ": 0 findings" in out
    figure(f"wire.{wire['protocol']}.spans", len(names))


def test_metrics_arrive_with_their_declared_names_and_units(wire):
    import yaml

    declared = {m["name"]: m for m in yaml.safe_load((SPECS / "telemetry.yaml").read_text())["metrics"]}
    received: dict[str, dict[str, Any]] = {}
    for resource in wire["metrics"]["resourceMetrics"]:
        for scope in resource["scopeMetrics"]:
            assert scope["scope"]["name"] == "megatron"
            for metric in scope["metrics"]:
                received[metric["name"]] = metric
    # recorded by the run: the rest need CUDA (memory), --log-throughput, or a skipped iteration
    recorded = {
        "megatron.training.step_duration_ms",
        "megatron.training.loss",
        "megatron.training.tokens_per_sec",
        "megatron.training.grad_norm",
        "megatron.training.learning_rate",
    }
    assert set(received) == recorded
    kinds = {"histogram": "histogram", "gauge": "gauge", "counter": "sum"}
    for name, metric in received.items():
        assert metric["unit"] == declared[name]["unit"], name
        assert kinds[declared[name]["kind"]] in metric, name
        assert metric["description"] == declared[name]["description"], name
    points = received["megatron.training.step_duration_ms"]["histogram"]["dataPoints"]
    assert sum(int(p["count"]) for p in points) >= 3
    (loss,) = received["megatron.training.loss"]["gauge"]["dataPoints"][-1:]
    assert loss["asDouble"] == pytest.approx(wire["results"]["losses"][-1])
    figure(f"wire.{wire['protocol']}.metrics", sorted(received))


def test_resource_attributes_arrive(wire):
    metrics = wire["metrics"]["resourceMetrics"]
    traces = json.loads(Path(wire["traces"]).read_text())["resourceSpans"]
    assert metrics and traces
    resources = [_attributes(r["resource"]["attributes"]) for r in metrics + traces]
    for attributes in resources:
        assert attributes["service.name"] == SERVICE
        assert attributes["dl.local_rank"] == "0" and attributes["dl.world_size"] == "1"
        assert attributes["slurm.job.id"] == "4242" and attributes["slurm.procid"] == "0"
        assert re.fullmatch(r"[0-9a-f-]{36}", attributes["job_uuid"])
        assert attributes["megatron.num_layers"] == "2" and attributes["megatron.precision"] == "fp32"


# The fault tests run on the runtime's own providers and on the providers opentelemetry-instrument
# sets from the OTEL_* variables (the lean path through the distro's exporter).
PROVIDERS = ["own", "distro"]


def fault_worker(
    fork_root: Path, args: list[str], receiver: OtlpReceiver, cwd: Path, provider: str, **extra: str
) -> Worker:
    """``otlp_worker.py`` for a fault run on ``provider``'s providers (the distro's exporters take
    their timeout from OTEL_EXPORTER_OTLP_TIMEOUT, the runtime's from MEGATRON_OTEL_EXPORT_TIMEOUT_S)."""
    env = fault_env(receiver, **extra)
    if provider == "distro":
        env = distro_env(receiver, **{**env, "OTEL_EXPORTER_OTLP_TIMEOUT": str(EXPORT_TIMEOUT_S)})
        args = [*args, "--recording", "distro"]
    return Worker(fork_root, args, env, cwd, instrument=provider == "distro")


def check_tracer(worker: Worker, provider: str) -> None:
    """The run recorded on the lean path (the distro's provider too)."""
    assert worker.results()["tracer"] == "LeanTracer", (provider, worker.output()[-3000:])


# --------------------------------------------------------------------------------------------
# faults: step time


# A warm-up phase first (not counted); healthy phases between the faults.
STEP_PHASES = ("warmup", "accept", "slow", "accept", "refuse", "accept", "absent", "accept")
STEPS_PER_PHASE = 20
PHASE_SECONDS = 2.5  # each fault lasts a few export rounds (OTEL_BSP_SCHEDULE_DELAY=200 ms)


@pytest.fixture(scope="module", params=PROVIDERS)
def step_phases(request, fork_root: Path, tmp_path_factory) -> dict[str, Any]:
    """One training process; the receiver changes mode between phases of the same steps."""
    work = tmp_path_factory.mktemp(f"otlp-steps-{request.param}")
    labels = [f"{index}-{mode}" for index, mode in enumerate(STEP_PHASES)]
    with OtlpReceiver("http", delay_s=2.0) as receiver:
        args = ["train", "--port", str(free_port()), "--steps", str(STEPS_PER_PHASE)]
        args += ["--phases", ",".join(labels), "--phase-seconds", str(PHASE_SECONDS)]
        args += ["--save-interval", "0"]
        worker = fault_worker(fork_root, args, receiver, work, request.param)
        for label, mode in zip(labels, STEP_PHASES):
            worker.expect(f"PHASE {label}")
            receiver.set_mode("accept" if mode == "warmup" else mode)
            worker.send()
        worker.expect("END")
        assert worker.wait() == 0, worker.output()[-4000:]
        modes = [(r.mode, r.status) for r in receiver.requests()]
    check_tracer(worker, request.param)
    results = worker.results()
    by_mode: dict[str, list[float]] = {}
    cpu_by_mode: dict[str, list[float]] = {}
    for label, mode in zip(labels, STEP_PHASES):
        by_mode.setdefault(mode, []).extend(results["phases"][label])
        cpu_by_mode.setdefault(mode, []).extend(results["cpu"][label])
    calls: dict[str, list[str]] = {}
    collected: dict[str, list[str]] = {}
    for label, mode in zip(labels, STEP_PHASES):
        calls.setdefault(mode, []).extend(results["training_thread_export_calls"][label])
        collected.setdefault(mode, []).extend(results["training_thread_collected_calls"].get(label, []))
    return {
        "provider": request.param,
        "by_mode": by_mode,
        "cpu": cpu_by_mode,
        "requests": modes,
        "training_thread_calls": calls,
        "training_thread_collected_calls": collected,
        "export_threads": results["export_threads"],
        "output": worker.output(),
    }


@pytest.mark.parametrize("mode", ["slow", "refuse", "absent"])
def test_a_failing_collector_does_not_slow_training_steps(step_phases, mode):
    """The training thread never runs the export: during the steps of each fault it made no call
    into the exporters, their transports or the runtime's export methods, and slept nowhere; every
    OTLP/HTTP request was sent by another thread (the span export thread, the metric reader's).
    Finalizers the garbage collector ran on the training thread are counted apart (a figure).
    The step-time ratios are figures only (the step benchmark's rows measure them): a loaded
    machine stretches wall time by several times."""
    by_mode, cpu = step_phases["by_mode"], step_phases["cpu"]
    healthy = statistics.median(by_mode["accept"])
    provider = step_phases["provider"]
    figure(f"step.{provider}.median_ms.accept", round(healthy * 1000, 2))
    figure(f"step.{provider}.ratio.{mode}", round(statistics.median(by_mode[mode]) / healthy, 3))
    cpu_ratio = statistics.median(cpu[mode]) / statistics.median(cpu["accept"])
    figure(f"step.{provider}.training_thread_cpu_ratio.{mode}", round(cpu_ratio, 3))
    collected = step_phases["training_thread_collected_calls"]
    figure(f"step.{provider}.training_thread_collected_calls.{mode}", len(collected.get(mode, [])))
    assert len(by_mode[mode]) >= STEPS_PER_PHASE
    assert step_phases["training_thread_calls"][mode] == [], mode
    assert step_phases["training_thread_calls"]["accept"] == []
    threads = step_phases["export_threads"]  # thread name -> OTLP/HTTP requests it sent
    assert "MainThread" not in threads and threads.get("megatron-otel-export"), threads


COLLECTED_ON_THE_WATCHED_THREAD = """
import gc, io, sys, threading
import otlp_worker, urllib3
watch = otlp_worker.ExportWatch()
def drop():  # the export thread drops a response inside a cycle
    response = urllib3.HTTPResponse(body=io.BytesIO(b"x"), preload_content=False)
    response.cycle = response
thread = threading.Thread(target=drop)
thread.start()
thread.join()
watch.start("phase")
gc.collect()  # frees it on the watched thread, running its finalizer there
watch.stop()
print(repr((watch.calls, watch.collected)))
"""


def test_a_collection_on_the_training_thread_is_not_counted_as_an_export_call():
    """The garbage collector finalizes what it frees in whichever thread triggered it (a CI run's
    training thread met a timed-out response's ``HTTPResponse.closed`` in a healthy phase after the
    slow one): ``ExportWatch`` keeps those calls apart from the training thread's own."""
    import ast
    import subprocess
    import sys

    worker_dir = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", COLLECTED_ON_THE_WATCHED_THREAD],
        cwd=worker_dir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    calls, collected = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert calls == {"phase": []}
    assert [call.rsplit(":", 1)[1] for call in collected["phase"]] == ["closed"], collected
    assert all("/urllib3/" in call for call in collected["phase"])


def test_the_exporter_met_every_fault_during_the_steps(step_phases):
    seen = {(mode, status) for mode, status in step_phases["requests"]}
    assert ("slow", "ok") in seen and ("refuse", "refused") in seen
    assert ("accept", "ok") in seen
    # with nothing listening the exporter's attempts fail to connect; the receiver sees none
    assert not any(mode == "absent" for mode, _ in step_phases["requests"])


# --------------------------------------------------------------------------------------------
# faults: exit, queue, recovery


EXIT_SPANS = 3000  # several export batches queued when the run ends
EXIT_MARGIN_S = 1.5  # on top of the goal (flush timeout + 1 s): process scheduling on shared CI


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("how", ["normal", "exception", "sigterm"])
def test_exit_with_no_collector_takes_at_most_the_flush_timeout(how, provider, fork_root, tmp_path):
    with OtlpReceiver("http", mode="absent") as receiver:
        args = ["spans", "--count", str(EXIT_SPANS), "--end", how]
        # all of it left for the exit
        worker = fault_worker(fork_root, args, receiver, tmp_path, provider, OTEL_BSP_SCHEDULE_DELAY="60000")
        if how == "sigterm":
            worker.expect("WAITING")
            started = time.time()
            worker.proc.send_signal(signal.SIGTERM)
            code = worker.wait()
            assert code == -signal.SIGTERM, worker.output()[-4000:]
            seconds = worker.ended_at - started
        else:
            started = float(worker.expect("END")[1].split()[1])
            exited = float(worker.expect("EXITED")[1].split()[1])
            code = worker.wait()
            assert code == (0 if how == "normal" else 1), worker.output()[-4000:]
            seconds = exited - started
            figure(f"exit.{provider}.{how}.process_s", round(worker.ended_at - started, 2))
            check_tracer(worker, provider)
        assert receiver.requests() == []
    figure(f"exit.{provider}.{how}.telemetry_s", round(seconds, 2))
    assert seconds <= FLUSH_TIMEOUT_S + 1 + EXIT_MARGIN_S, (how, seconds, worker.output()[-3000:])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_queued_spans_stay_bounded_and_drops_are_counted_and_logged_once(provider, fork_root, tmp_path):
    count = 20_000
    with OtlpReceiver("http", mode="absent") as receiver:
        args = ["spans", "--count", str(count)]
        worker = fault_worker(
            fork_root, args, receiver, tmp_path, provider, OTEL_BSP_MAX_QUEUE_SIZE=str(MAX_QUEUE)
        )
        worker.expect("END")
        assert worker.wait() == 0, worker.output()[-4000:]
    check_tracer(worker, provider)
    results = worker.results()
    assert 0 < max(results["queued"]) <= MAX_QUEUE
    rss = results["rss"]
    growth = max(rss[5:]) - rss[5]  # from a quarter of the way in: the queue is full by then
    figure(f"queue.{provider}.max_queued", max(results["queued"]))
    figure(f"queue.{provider}.rss_growth_mb_last_75pct", round(growth / 2**20, 2))
    figure(f"queue.{provider}.spans_per_s_no_collector", round(count / results["seconds"]))
    assert growth < 16 * 2**20, rss
    output = worker.output()
    first = [line for line in output.splitlines() if "span queue is full" in line]
    assert len(first) == 1, output[-4000:]
    (summary,) = [line for line in output.splitlines() if "spans dropped while" in line]
    dropped, failed, left = (
        int(n) for n in re.findall(r"(\d+) (?:spans dropped|lost|still queued)", summary)
    )
    figure(f"queue.{provider}.dropped_failed_left", [dropped, failed, left])
    assert count // 2 < dropped < count  # most of them: the queue was full nearly all the time
    assert count - MAX_QUEUE <= dropped + failed + left <= count  # every span accounted for


@pytest.mark.parametrize("provider", PROVIDERS)
def test_export_recovers_when_the_collector_comes_back(provider, fork_root, tmp_path):
    before, after = 1000, 200
    with OtlpReceiver("http", mode="absent") as receiver:
        args = ["spans", "--count", str(before), "--more", str(after)]
        worker = fault_worker(fork_root, args, receiver, tmp_path, provider)
        worker.expect("HALF")
        time.sleep(1.0)  # the exporter fails at least once
        receiver.set_mode("accept")
        came_back = time.monotonic()
        worker.send()
        worker.expect("MORE")

        def later(r: OtlpReceiver) -> int:
            return sum(
                1
                for span in r.spans()
                for a in span.get("attributes", [])
                if a["key"] == "megatron.iteration" and int(a["value"]["intValue"]) >= 1_000_000
            )

        arrived = receiver.wait_for(lambda r: later(r) == after, timeout=30)
        figure(
            f"recovery.{provider}.seconds_until_later_spans_arrived", round(time.monotonic() - came_back, 2)
        )
        worker.send()
        worker.expect("END")
        assert worker.wait() == 0, worker.output()[-4000:]
    check_tracer(worker, provider)
    assert arrived, f"{later(receiver)} of {after} later spans arrived while the run went on"
