"""Where the export's time goes per span on the lean path: prints a table.

    .tox/runtime/bin/python -m benchmarks.export_profile [--spans N] [--out FILE] [--sdk-encoding]

The runtime is configured as a job configures it (``configure()`` from ``MEGATRON_OTEL_*``: its own
``TracerProvider``, the lean recorder, the OTLP/HTTP exporter to the tests' live receiver in a
child process). The training thread records ``N`` layer-shaped spans (``span_profile.py``'s) with
the export thread held back (a schedule delay of an hour, a queue that holds them all), then this
thread exports them as the export thread does (the recorder's drain: batches of
``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``, default 512), first timed (CPU, the median of 5), then under
``cProfile``, whose own time per function is summed into categories: turning records into SDK
``ReadableSpan`` objects (materialize), attribute validation, the OTLP encoding (the exporter's
encoder or the runtime's own), the protobuf runtime, the HTTP request (requests, urllib3,
http.client, sockets), the rest. ``--sdk-encoding`` makes the recorder go through ``ReadableSpan``
and the exporter's own ``export`` (the path before the runtime encoded OTLP itself).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import print_table
from benchmarks.span_profile import run_spans

CATEGORIES: list[tuple[str, object]] = [
    ("HTTP request (requests, urllib3, http.client, socket)", lambda f, n: any(p in f for p in ("/requests/", "/urllib3/", "http/client", "socket", "/ssl", "email/", "/http_transport/", "/exporter/http/", "/_http", "/idna/", "/certifi/"))),
    ("runtime's own OTLP encoding (_otlp)", lambda f, n: f.endswith("_otlp.py")),
    ("exporter's OTLP encoding (trace_encoder, _encode_*)", lambda f, n: "/proto/common/" in f or "trace_encoder" in f),
    ("protobuf runtime (messages, serialization)", lambda f, n: "protobuf" in f or "_pb2" in f or "SerializePartialToString" in n or "SerializeToString" in n),
    ("attribute validation (BoundedAttributes)", lambda f, n: "/attributes/" in f or "BoundedAttributes" in n),
    ("ReadableSpan and the SDK's objects (materialize)", lambda f, n: "opentelemetry/sdk" in f or "opentelemetry/trace" in f or n == "materialize"),
    ("runtime's recorder (_lean_recorder, _batching: drain, take, ids)", lambda f, n: "otel_runtime" in f),
]  # fmt: skip


def _category(file: str, function: str) -> str:
    for name, predicate in CATEGORIES:
        if predicate(file, function):  # type: ignore[operator]
            return name
    return "other (builtins charged to no caller, the profile loop)"


def categorize(stats: pstats.Stats, spans: int) -> dict[str, float]:
    """Own time per function; a builtin's time goes to its caller's category."""
    totals: dict[str, float] = {}
    for (file, _line, function), (_cc, _calls, tottime, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if file == "~" and callers:
            (caller_file, _l, caller_function), *_ = max(callers.items(), key=lambda kv: kv[1][2])[0:1]
            name = _category(caller_file, caller_function)
        else:
            name = _category(file, function)
        totals[name] = totals.get(name, 0.0) + tottime
    return {name: value / spans for name, value in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=3000, help="spans per measurement (multiple of 3)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument(
        "--sdk-encoding", action="store_true", help="ReadableSpans through the exporter's own encoder"
    )
    options = parser.parse_args()

    from benchmarks.receiver import ReceiverProcess

    with ReceiverProcess("http") as receiver:
        os.environ.update(receiver.environ)
        os.environ.update(
            MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_SPAN_GROUPS="all", MEGATRON_OTEL_EXPORTER="otlp",
            MEGATRON_OTEL_METRICS_ENABLED="0", MEGATRON_OTEL_OWN_PROVIDERS="1",
            OTEL_BSP_MAX_QUEUE_SIZE=str(max(4 * options.spans, 2048)), OTEL_BSP_SCHEDULE_DELAY="3600000",
        )  # fmt: skip
        import codegen.otel_runtime as otel
        from codegen.otel_runtime import _lean_recorder

        if options.sdk_encoding:
            from codegen.otel_runtime import _otlp

            _otlp.ENABLED = False
        rounds = options.spans // 3

        def recorded() -> tuple[Any, int]:
            otel.configure()
            (recorder,) = [
                r for r in otel._state.PROCESS.run.processors if isinstance(r, _lean_recorder.LeanRecorder)
            ]
            # the export thread held back: it waits on the old event, which a full batch no
            # longer sets (else it exports while the spans are recorded, and the drain below
            # mostly waits for its lock)
            recorder.wake = threading.Event()
            return recorder, run_spans(otel, rounds)

        cpus = []
        here = []  # spans each drain exported itself
        for attempt in range(6):
            recorder, spans = recorded()
            before = recorder.exported
            cpu = time.thread_time()
            recorder._drain(None)
            cpu = time.thread_time() - cpu
            here.append(recorder.exported - before)
            otel.reset()
            if attempt:
                cpus.append(cpu / spans)
        cpus.sort()
        cpu = cpus[len(cpus) // 2]
        recorder, spans = recorded()
        before = recorder.exported
        profile = cProfile.Profile()
        profile.enable()
        recorder._drain(None)
        profile.disable()
        here.append(recorder.exported - before)
        otel.reset()
        got = receiver.span_count()
        stats = pstats.Stats(profile)
        per_span = categorize(stats, spans)
        profiled = sum(per_span.values())
        how = (
            "ReadableSpan + the exporter's encoder" if options.sdk_encoding else "as the runtime exports now"
        )
        lines = [f"# export CPU per span, lean path, OTLP/HTTP to a live receiver ({how})"]
        lines.append("# command: .tox/runtime/bin/python -m benchmarks.export_profile "
                     f"--spans {options.spans}" + (" --sdk-encoding" if options.sdk_encoding else "")
                     + (f" --out {options.out}" if options.out else ""))  # fmt: skip
        lines.append(f"# python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
                     f"{threading.active_count()} threads; the receiver got {got} spans")  # fmt: skip
        lines.append(f"export, CPU per span (median of 5 x {spans} spans, batches of "
                     f"{recorder.batch_size}): {cpu * 1e6:.2f} us")  # fmt: skip
        lines.append(f"exported by the profiled thread: {min(here)} of {spans} spans "
                     f"(the fewest of its {len(here)} drains)")  # fmt: skip
        lines.append(f"under cProfile: {profiled * 1e6:.2f} us per span; each category's share of it, "
                     "applied to the unprofiled CPU time:")  # fmt: skip
        lines.append(f"{'category':58s} {'share':>7s} {'us/span':>9s}")
        for name, value in sorted(per_span.items(), key=lambda kv: -kv[1]):
            share = value / profiled if profiled else 0.0
            lines.append(f"{name:58s} {share * 100:6.1f}% {share * cpu * 1e6:9.2f}")
        lines.append("")
        lines.append("top functions by own time (cProfile):")
        lines.append(f"{'us/span':>9s}  {'calls/span':>10s}  function")
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:25]  # type: ignore[attr-defined]
        for (file, line, function), (_cc, calls, tottime, _ct, _callers) in rows:
            where = file.split("site-packages/")[-1].split("/work/")[-1]
            lines.append(f"{tottime / spans * 1e6:9.2f}  {calls / spans:10.2f}  {where}:{line}({function})")
    print_table(lines, options.out)


if __name__ == "__main__":
    main()
