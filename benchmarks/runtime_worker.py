"""Per-call cost of generated spans and the guards they replace; run as a script, prints JSON.

    python benchmarks/runtime_worker.py --off-tree DIR --on-tree DIR [--lens] [--rounds N]

Both trees hold the generator's output for ``fixture/``: the one from ``--off-tree`` is imported
and never enabled (telemetry off entirely); the one from ``--on-tree`` is enabled for the
``recording`` group only, with a recording SDK tracer, so its ``function`` and ``statement`` spans
are disabled groups of an enabled runtime. Needs only the stdlib, opentelemetry-api/sdk and, with
``--lens``, nemo-lens (a separate interpreter: nemo-lens needs Python 3.13).
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys

import reference_shapes as ref
from timing import Variant, instruction_loops, measure

WORKLOAD = list(range(12))
FIXTURE_MODULE = "megatron.benchfix.work"


def import_tree(tree: str):
    """Import the fixture module from ``tree`` as an independent copy (its own runtime package)."""
    for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    try:
        module = importlib.import_module(FIXTURE_MODULE)
    finally:
        sys.path.remove(tree)
    for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
        del sys.modules[name]
    return module


def lens_variants(tracer, clear) -> tuple[list[Variant], str]:
    try:
        from nemo import lens
        from nemo.lens import managed_span, set_enabled_span_groups, trace_fn
    except ImportError as exc:
        return [], f"not importable: {exc}"
    set_enabled_span_groups(frozenset({"recording"}))

    def empty_lens_managed_span_off():
        with managed_span("statement", "bench.empty.statement"):
            result = None

    @trace_fn("function", "bench.empty.function")
    def empty_lens_trace_fn_off():
        result = None

    def empty_lens_managed_span_on():
        with managed_span("recording", "bench.empty.lens", tracer=tracer):
            result = None

    @trace_fn("recording", "bench.empty.lens", tracer=tracer)
    def empty_lens_trace_fn_on():
        result = None

    version = getattr(lens, "__version__", None)
    if version is None:
        try:
            from importlib.metadata import version as dist_version

            version = dist_version("nemo-lens")
        except Exception:
            version = "?"
    return [
        Variant("lens.managed_span.off", empty_lens_managed_span_off),
        Variant("lens.trace_fn.off", empty_lens_trace_fn_off),
        Variant("lens.managed_span.on", empty_lens_managed_span_on, after_round=clear),
        Variant("lens.trace_fn.on", empty_lens_trace_fn_on, after_round=clear),
    ], f"nemo-lens {version}"


# What ``--instructions`` loops over (``timing.instruction_loops``): the variants it counts.
INSTRUCTION_VARIANTS = (
    "empty.base", "empty.function.group_off", "empty.statement.group_off",
    "small.base", "small.function.group_off", "small.statement.group_off",
)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--off-tree", required=True)
    parser.add_argument("--on-tree", required=True)
    parser.add_argument("--lens", action="store_true", help="only the empty workload, plus nemo-lens")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--target-ms", type=float, default=4.0)
    parser.add_argument(
        "--instructions",
        type=int,
        default=0,
        help="N: run each per-call variant N times, each loop inside its own exec() (callgrind "
        "--dump-after=builtin_exec counts each loop's instructions: see timing.instruction_loops)",
    )
    args = parser.parse_args()

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ref.TRACER = provider.get_tracer("bench.sdk")

    off = import_tree(args.off_tree)
    on = import_tree(args.on_tree)
    assert off._otel is not on._otel, "the two fixture copies share a runtime"
    enabled = on._otel.enable("recording", tracer_provider=provider)
    assert enabled == frozenset({"recording"}), enabled

    # Sanity: the generated code records exactly when its group is on, and computes the same result.
    on.empty_recording(), on.empty_function(), on.empty_statement(), off.empty_recording()
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["bench.empty.recording"], names
    expected = off.small_base(WORKLOAD)
    for func in (
        on.small_function,
        on.small_statement,
        on.small_recording,
        ref.small_trace_fn,
        ref.small_sdk,
    ):
        assert func(WORKLOAD) == expected, func
    exporter.clear()

    clear = exporter.clear
    empty = [
        Variant("empty.base", on.empty_base),
        Variant("empty.function.group_off", on.empty_function),
        Variant("empty.statement.group_off", on.empty_statement),
        Variant("empty.function.never_enabled", off.empty_function),
        Variant("empty.recording", on.empty_recording, after_round=clear),
        Variant("empty.if_flag", ref.empty_if_flag),
        Variant("empty.ref_managed_span", ref.empty_managed_span),
        Variant("empty.ref_trace_fn", ref.empty_trace_fn),
        Variant("empty.sdk", ref.empty_sdk, after_round=clear),
    ]
    small = [
        Variant("small.base", on.small_base, (WORKLOAD,)),
        Variant("small.function.group_off", on.small_function, (WORKLOAD,)),
        Variant("small.statement.group_off", on.small_statement, (WORKLOAD,)),
        Variant("small.function.never_enabled", off.small_function, (WORKLOAD,)),
        Variant("small.recording", on.small_recording, (WORKLOAD,), after_round=clear),
        Variant("small.if_flag", ref.small_if_flag, (WORKLOAD,)),
        Variant("small.ref_managed_span", ref.small_managed_span, (WORKLOAD,)),
        Variant("small.ref_trace_fn", ref.small_trace_fn, (WORKLOAD,)),
        Variant("small.sdk", ref.small_sdk, (WORKLOAD,), after_round=clear),
        Variant("empty.sdk_attributes", ref.empty_sdk_attributes, after_round=clear),
    ]
    if args.instructions:
        instruction_loops([*empty, *small[:4]], INSTRUCTION_VARIANTS, args.instructions)
        return 0
    lens_status = "not requested"
    if args.lens:
        extra, lens_status = lens_variants(ref.TRACER, clear)
        variants = empty + extra
    else:
        variants = empty + small
    results = measure(variants, args.rounds, args.target_ms / 1000)
    json.dump(
        {
            "python": platform.python_version(),
            "lens": lens_status,
            "results": {name: r.as_json() for name, r in results.items()},
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
