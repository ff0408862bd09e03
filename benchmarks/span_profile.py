"""Where one span's time goes on the training thread, as production records it; prints a table.

    .tox/runtime/bin/python -m benchmarks.span_profile [--spans N] [--out FILE] [--lean]

The runtime is configured as a job configures it (``configure()`` from ``MEGATRON_OTEL_*``: the
runtime's own ``TracerProvider``, its bounded batch span processor, the OTLP/HTTP exporter) and
exports to the live receiver of the tests (``tests/megatron_cpu/otlp_receiver.py``) on 127.0.0.1.
The training thread starts and ends ``N`` spans the way Megatron's layers do (a
``megatron.layer.forward`` with ``self_attention`` and ``mlp`` children, the statement sites'
``otel.start_span(name)`` / ``.end()``), first timed (wall and CPU), then under ``cProfile``. The
profile's own time per function is summed into categories (id generation, sampler, attribute
handling, context attach/detach, processor ``on_start``/``on_end``, the SDK's span objects, the
runtime's own code) and each category's share is applied to the unprofiled per-span cost. The
export thread's CPU per span is measured at the flush that follows (the OTLP encoding and the
HTTP request). ``--lean`` profiles the lean path instead (``_lean_*``, the runtime's own providers).
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

from benchmarks import print_table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "megatron_cpu"))

# (category, predicate on (file, function)); the first that matches wins.
CATEGORIES: list[tuple[str, object]] = [
    ("id generation", lambda f, n: "id_generator" in f or f.endswith("_ids.py") or "generate_" in n or n in ("urandom", "getrandbits", "from_bytes")),
    ("sampler", lambda f, n: f.endswith("sampling.py")),
    ("attribute handling", lambda f, n: "/attributes/" in f or "BoundedAttributes" in n or n in ("_new_links", "_clean_attribute")),
    ("context attach/detach", lambda f, n: "/context/" in f or n in ("set_span_in_context", "get_current_span", "set", "reset", "get")),
    ("processor on_start/on_end", lambda f, n: "export/__init__" in f or "_shared_internal" in f or n in ("on_start", "on_end", "emit", "append", "push")),
    ("runtime (otel_runtime) own code", lambda f, n: "otel_runtime" in f or "/megatron/core/otel/" in f),
    ("SDK span objects (start_span, _Span, end, SpanContext)", lambda f, n: "opentelemetry" in f),
]  # fmt: skip
# Builtins charged to a category of their own (by name) rather than to their callers.
BUILTINS: list[tuple[str, str]] = [
    ("context attach/detach", "_contextvars.ContextVar"),
    ("id generation", "getrandbits"),
    ("clock readings (time.time_ns)", "time.time_ns"),
]
NESTED = ("megatron.layer.forward", ("megatron.layer.self_attention", "megatron.layer.mlp"))


def run_spans(otel, rounds: int) -> int:
    """``rounds`` layer spans with two children each, as the statement sites record them."""
    outer, inner = NESTED
    spans = 0
    for _ in range(rounds):
        layer = otel.LAYER and otel.start_span(outer)
        for name in inner:
            child = otel.LAYER and otel.start_span(name)
            child and child.end()
        layer and layer.end()
        spans += 3
    return spans


def _category(file: str, function: str) -> str | None:
    if file == "~":
        return next((name for name, part in BUILTINS if part in function), None)
    if file.startswith("<frozen") or file.endswith("span_profile.py"):
        return None  # builtins and the standard library's abc machinery: charged to their callers
    for name, predicate in CATEGORIES:
        if predicate(file, function):  # type: ignore[operator]
            return name
    return None


def categorize(stats: pstats.Stats, spans: int) -> dict[str, float]:
    """Own time per span by category; a builtin's time goes to its callers' categories, except
    the context variable's methods, the id generator's and the clock's (``BUILTINS``)."""
    table = stats.stats  # type: ignore[attr-defined]
    totals: dict[str, float] = {name: 0.0 for name, _ in CATEGORIES + BUILTINS}
    other = "other (the benchmark loop, unattributed builtins)"
    totals[other] = 0.0

    def charge(func: tuple, seconds: float, depth: int) -> None:
        category = _category(func[0], func[2])
        if category is not None:
            totals[category] += seconds
            return
        callers = table.get(func, (0, 0, 0, 0, {}))[4]
        edges = {caller: edge[2] if isinstance(edge, tuple) else 0.0 for caller, edge in callers.items()}
        weight = sum(edges.values()) if depth < 4 else 0.0
        if not weight:
            totals[other] += seconds
            return
        for caller, share in edges.items():
            charge(caller, seconds * share / weight, depth + 1)

    for func, (_cc, _nc, tottime, _ct, _callers) in table.items():
        charge(func, tottime, 0)
    return {name: value / spans for name, value in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=3000, help="spans per measurement (multiple of 3)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("--lean", action="store_true", help="the lean recording path")
    options = parser.parse_args()

    from benchmarks.receiver import ReceiverProcess

    with ReceiverProcess("http") as receiver:
        os.environ.update(receiver.environ)
        os.environ.update(
            MEGATRON_OTEL_ENABLED="1", MEGATRON_OTEL_SPAN_GROUPS="all", MEGATRON_OTEL_EXPORTER="otlp",
            MEGATRON_OTEL_METRICS_ENABLED="0", MEGATRON_OTEL_OWN_PROVIDERS="1",
            OTEL_BSP_MAX_QUEUE_SIZE=str(max(4 * options.spans, 2048)),
        )  # fmt: skip
        import codegen.otel_runtime as otel

        lean_module = getattr(otel, "_lean_install", None)
        if lean_module is not None:
            lean_module.ALLOWED = options.lean
        elif options.lean:
            raise SystemExit("this runtime has no lean path")
        rounds = options.spans // 3
        lines = []
        # warm up, then the unprofiled cost: the median of 5 runs, wall and training-thread CPU
        walls, cpus, export_cpus = [], [], []
        for attempt in range(6):
            otel.configure()
            process = time.process_time()
            start, cpu = time.perf_counter(), time.thread_time()
            spans = run_spans(otel, rounds)
            wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
            otel.reset()  # the flush at the end of the run: what the spans queued is exported
            # the receiver runs in another process: what this one spent besides recording is export
            export = time.process_time() - process - cpu
            if attempt:
                walls.append(wall / spans)
                cpus.append(cpu / spans)
                export_cpus.append(export / spans)
        walls.sort(), cpus.sort(), export_cpus.sort()
        wall, cpu, export = walls[len(walls) // 2], cpus[len(cpus) // 2], export_cpus[len(export_cpus) // 2]
        got = receiver.span_count()
        otel.configure()
        profile = cProfile.Profile()
        profile.enable()
        spans = run_spans(otel, rounds)
        profile.disable()
        otel.reset()
        stats = pstats.Stats(profile)
        per_span = categorize(stats, spans)
        profiled = sum(per_span.values())
        path = "lean" if options.lean else "SDK"
        lines.append(f"# per-span cost on the training thread, {path} path, production processors")
        lines.append(f"# command: .tox/runtime/bin/python -m benchmarks.span_profile --spans {options.spans}"
                     + (" --lean" if options.lean else "") + (f" --out {options.out}" if options.out else ""))  # fmt: skip
        lines.append(f"# python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
                     f"{threading.active_count()} threads; the receiver got {got} spans")  # fmt: skip
        lines.append(
            f"training thread, per span (median of 5 x {spans} spans): wall {wall * 1e6:.2f} us, CPU {cpu * 1e6:.2f} us"
        )
        lines.append(f"export (batch thread + flush), CPU per span: {export * 1e6:.2f} us")
        lines.append(f"under cProfile: {profiled * 1e6:.2f} us per span; each category's share of it, "
                     "applied to the unprofiled training-thread CPU time:")  # fmt: skip
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
