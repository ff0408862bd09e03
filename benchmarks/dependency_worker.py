"""Per-call cost of a disabled span in a dependency-mode tree (issue 32); run as a script, prints JSON.

    python benchmarks/dependency_worker.py --tree DIR [--runtime SITE] [--rounds N] [--instructions N]

``DIR`` holds the generator's output for ``fixture/`` in dependency mode (the import shim and the
taxonomy as ``megatron/core/otel/``). Without ``--runtime`` the shim's no-ops serve the call sites
(the package absent); with it, ``SITE`` holds ``megatron-otel-runtime`` and the ``recording`` group
is enabled, so the ``function`` span is a disabled group of an enabled runtime. With
``--instructions N`` it runs each variant N times for callgrind instead (``timing.instruction_loops``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys

from timing import Variant, instruction_loops, measure

FIXTURE_MODULE = "megatron.benchfix.work"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", required=True)
    parser.add_argument("--runtime")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--target-ms", type=float, default=4.0)
    parser.add_argument("--instructions", type=int, default=0, help="N: each variant N times, for callgrind")
    args = parser.parse_args()
    sys.path[:0] = [args.tree, *([args.runtime] if args.runtime else [])]
    work = importlib.import_module(FIXTURE_MODULE)
    package = work._otel.__name__
    if args.runtime:
        assert package == "megatron_otel_runtime", package
        from opentelemetry.sdk.trace import TracerProvider

        assert work._otel.enable("recording", tracer_provider=TracerProvider()) == {"recording"}
    else:
        assert package != "megatron_otel_runtime", package  # the shim's no-ops
    key = "package" if args.runtime else "shim"
    variants = [
        Variant(f"{key}.base", work.empty_base),
        Variant(f"{key}.function.group_off", work.empty_function),
        Variant(f"{key}.statement.group_off", work.empty_statement),
    ]
    if args.instructions:
        instruction_loops(variants, [v.name for v in variants], args.instructions)
        return 0
    results = measure(variants, args.rounds, args.target_ms / 1000)
    out = {name: r.as_json() for name, r in results.items()}
    json.dump({"python": platform.python_version(), "results": out}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
