"""One exporting rank for the volume test: the runtime's own configure() and export path (OTLP/HTTP
to the receiver the environment names), recording ``--spans`` spans replayed from the taxonomy's
names in the ``all`` preset, then shutdown(); prints how many it recorded.

    python volume_worker.py --rank R --world-size N --spans K

The runtime is imported from the repository (``codegen.otel_runtime``; the test puts the repository
on ``PYTHONPATH``), no Megatron needed.
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--spans", type=int, required=True)
    options = parser.parse_args()
    os.environ.update(
        RANK=str(options.rank),
        LOCAL_RANK=str(options.rank % 8),
        WORLD_SIZE=str(options.world_size),
        MEGATRON_OTEL_ENABLED="1",
        MEGATRON_OTEL_SPAN_GROUPS="all",
        MEGATRON_OTEL_EXPORT_RANKS="all",
        MEGATRON_OTEL_METRICS_ENABLED="0",
        MEGATRON_OTEL_FLUSH_TIMEOUT_S="60",
        # every span fits in the queue: what the test counts is what the transport loses, never
        # what a full queue drops while the receiver is busy
        OTEL_BSP_MAX_QUEUE_SIZE=str(max(8192, options.spans)),
    )
    from codegen.otel_runtime import SPANS, configure, shutdown, start_span

    groups = configure()
    names = sorted(n for n, (group, _) in SPANS.items() if group in groups)
    recorded = 0
    for index in range(options.spans):
        name = names[index % len(names)]
        span = start_span(name, lambda index=index: {"megatron.iteration": index})
        if span is not None:
            span.end()
            recorded += 1
    shutdown()
    print(json.dumps({"rank": options.rank, "recorded": recorded}))


if __name__ == "__main__":
    main()
