"""Telemetry volume per rank and per preset, measured, and the plan for 8 to 16,384 ranks.

    .tox/runtime/bin/python -m benchmarks.volume [--json benchmarks/volume.json] [--markdown FILE]

Measured (one rank, megatron.training's own ``pretrain()`` on CPU, the tiny GPT of the runtime
tests: 2 layers, 2 microbatches per step; the runtime's own providers exporting over OTLP/HTTP to
a live receiver in this process):

- **spans per step**, per preset: a run of ``SHORT`` and one of ``LONG`` iterations, with no
  checkpoint or evaluation inside the loop; (spans of the long run - spans of the short one) /
  (``LONG`` - ``SHORT``) is the steady-state count, startup, first iteration and the final
  evaluation cancelling out. Split by group: ``layer`` spans scale with microbatches x layers,
  ``microbatch`` and p2p spans with microbatches, the rest is per step;
- **OTLP bytes per span**, as sent: the protobuf size of every ``ExportTraceServiceRequest``
  the receiver got, over the spans in it (resource and scope amortised over the batch);
- **export thread CPU per span**: the spans of each preset's capture replayed through the SDK's
  batch span processor and OTLP/HTTP exporter (the runtime's export path) to the receiver;
  the export thread's CPU time (``time.thread_time`` around every ``export``) over the spans.

From these, ``render_table`` computes the volume arriving at the collector for 8, 1,024 and 16,384
ranks per export setting (formula beside the table); ``docs/guide/many-ranks.md`` holds the table
this module rendered from ``benchmarks/volume.json``, and a test re-renders it from the JSON and
compares.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PRESETS = ("default", "per_step", "all")
SHORT, LONG = 2, 5
TINY = {"layers": 2, "microbatches": 2}
# The shape the table assumes for a large job, per rank: microbatches per step, layers on the
# rank (its pipeline stage), seconds per step, pipeline stages (for one-per:pp).
PLAN = {"microbatches": 8, "layers": 4, "step_s": 2.0}
SCALES = (8, 1024, 16384)
PIPELINE = {8: 2, 1024: 8, 16384: 16}
SETTINGS = ("last", "one-per:pp", "every:64", "all")
HOT_MB_L = ("layer",)  # groups whose spans scale with microbatches x layers
HOT_MB = ("microbatch",)  # ... with microbatches (and the p2p spans of communication)


def exporting_ranks(setting: str, ranks: int) -> int:
    if setting == "last":
        return 1
    if setting == "all":
        return ranks
    if setting.startswith("every:"):
        return -(-ranks // int(setting[6:]))
    return PIPELINE[ranks]  # one-per:pp


# -- measuring ------------------------------------------------------------------------------------


def _receiver() -> Any:
    from tests.megatron_cpu.otlp_receiver import OtlpReceiver

    class SizingReceiver(OtlpReceiver):
        """Keeps, per trace request, its protobuf size and span count (and the request)."""

        def __init__(self) -> None:
            super().__init__("http")
            self.sizes: list[tuple[int, int]] = []

        def _answer(self, signal: str, decode: Any) -> tuple[str, float]:
            if decode is not None and signal == "traces":
                real = decode

                def decode() -> Any:
                    message = real()
                    spans = sum(len(s.spans) for rs in message.resource_spans for s in rs.scope_spans)
                    self.sizes.append((message.ByteSize(), spans))
                    return message

            return super()._answer(signal, decode)

    return SizingReceiver()


def _fork(work: Path) -> tuple[Path, Path]:
    from codegen.emit.tree import write_tree
    from codegen.pipeline import generate
    from tests.megatron_cpu.pretrain_harness import build_dataset_helpers

    generation = generate(REPO / "specs")
    fork = work / "fork"
    write_tree(fork, {p: new for p, (_, new) in generation.changes.items()}, base=generation.source_root)
    helpers = build_dataset_helpers(
        generation.source_root / "megatron/core/datasets/helpers.cpp", work / "helpers"
    )
    return fork, helpers


def _run(preset: str, iters: int, fork: Path, helpers: Path, work: Path) -> dict[str, Any]:
    from tests.megatron_cpu.pretrain_harness import MODEL_ARGV, Config, finish, start
    from tests.support.ports import free_port

    argv = (*MODEL_ARGV, "--train-iters", str(iters), "--eval-interval", "1000", "--num-workers", "0")
    receiver = _receiver().start()
    try:
        env = (*receiver.environ().items(), ("MEGATRON_OTEL_FLUSH_TIMEOUT_S", "30"))
        config = Config(preset, argv, env=env, live=True)
        run, procs = start(f"{preset}-{iters}", config, {"fork": fork}, helpers, work, free_port())
        finish(run, procs)
        run.check()
        spans = receiver.spans()
        return {"spans": spans, "sizes": list(receiver.sizes)}
    finally:
        receiver.stop()


def _group(name: str, attributes: dict[str, Any]) -> str:
    group = str(attributes.get("megatron.span_group", "?"))
    if name.startswith("megatron.p2p."):
        return "p2p"
    return group


def _attrs(raw: list[dict[str, Any]]) -> dict[str, Any]:
    from tests.megatron_cpu.pretrain_harness import _attributes

    return _attributes(raw)


def measure_preset(preset: str, fork: Path, helpers: Path, work: Path) -> dict[str, Any]:
    short = _run(preset, SHORT, fork, helpers, work)
    long = _run(preset, LONG, fork, helpers, work)
    counts: dict[str, collections.Counter[str]] = {}
    for label, run in (("short", short), ("long", long)):
        counts[label] = collections.Counter(
            _group(s["name"], _attrs(s.get("attributes", []))) for s in run["spans"]
        )
    per_step = {
        g: (counts["long"][g] - counts["short"][g]) / (LONG - SHORT)
        for g in sorted(set(counts["long"]) | set(counts["short"]))
    }
    sizes = short["sizes"] + long["sizes"]
    total_bytes, total_spans = sum(b for b, _ in sizes), sum(n for _, n in sizes)
    return {
        "spans_per_step_by_group": {g: v for g, v in per_step.items() if v},
        "spans_per_step": sum(per_step.values()),
        "bytes_per_span": total_bytes / max(1, total_spans),
        "largest_request_bytes": max((b for b, _ in sizes), default=0),
        "spans_exported": total_spans,
        "replay": long["spans"],
    }


def replay_cpu(spans: list[dict[str, Any]], copies: int) -> dict[str, float]:
    """Replay ``spans`` (names and attributes) ``copies`` times through the SDK's batch processor
    and OTLP/HTTP exporter to a live receiver; the export thread's CPU per span."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    receiver = _receiver().start()
    try:
        exporter = OTLPSpanExporter(endpoint=receiver.endpoint + "/v1/traces")
        spent = [0.0]
        export = exporter.export

        def timed(batch: Any) -> Any:
            began = time.thread_time()
            try:
                return export(batch)
            finally:
                spent[0] += time.thread_time() - began

        exporter.export = timed  # type: ignore[method-assign]
        provider = TracerProvider(resource=Resource.create({"service.name": "volume", "dl.rank": 0}))
        provider.add_span_processor(
            BatchSpanProcessor(exporter, max_queue_size=1 << 16, schedule_delay_millis=200)
        )
        tracer = provider.get_tracer("megatron")
        shapes = [(s["name"], _attrs(s.get("attributes", []))) for s in spans]
        count = 0
        for _ in range(copies):
            for name, attributes in shapes:
                tracer.start_span(name, attributes=attributes).end()
                count += 1
        provider.shutdown()
        received = sum(n for _, n in receiver.sizes)
        return {"cpu_us_per_span": spent[0] / max(1, count) * 1e6, "replayed": count, "received": received}
    finally:
        receiver.stop()


def measure() -> dict[str, Any]:
    results: dict[str, Any] = {"tiny": TINY, "short": SHORT, "long": LONG, "presets": {}}
    with tempfile.TemporaryDirectory(prefix="otel-volume-") as tmp:
        work = Path(tmp)
        fork, helpers = _fork(work)
        for preset in PRESETS:
            measured = measure_preset(preset, fork, helpers, work)
            replay = measured.pop("replay")
            copies = max(1, 20000 // max(1, len(replay)))
            measured.update(replay_cpu(replay, copies))
            results["presets"][preset] = measured
            print(f"{preset}: {json.dumps(measured)}", file=sys.stderr)
        shutil.rmtree(work / "fork", ignore_errors=True)
    return results


# -- the plan -------------------------------------------------------------------------------------


def spans_per_step(preset: dict[str, Any], microbatches: int, layers: int) -> float:
    """The measured count, scaled from the tiny GPT to ``microbatches`` x ``layers`` per rank."""
    tiny_mb, tiny_l = TINY["microbatches"], TINY["layers"]
    total = 0.0
    for group, count in preset["spans_per_step_by_group"].items():
        if group in HOT_MB_L:
            total += count / (tiny_mb * tiny_l) * microbatches * layers
        elif group in HOT_MB:
            total += count / tiny_mb * microbatches
        else:
            total += count
    return total


def render_table(results: dict[str, Any]) -> str:
    presets = results["presets"]
    mb, layers, step = PLAN["microbatches"], PLAN["layers"], PLAN["step_s"]
    lines = [
        (
            "| preset | spans/step/rank (tiny, measured) | spans/step/rank (planned shape) | "
            "OTLP bytes/span | export CPU us/span | export CPU per rank |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for name in PRESETS:
        p = presets[name]
        planned = spans_per_step(p, mb, layers)
        cpu = planned / step * p["cpu_us_per_span"] / 1e6
        lines.append(
            f"| {name} | {p['spans_per_step']:.1f} | {planned:.1f} | {p['bytes_per_span']:.0f} | "
            f"{p['cpu_us_per_span']:.0f} | {cpu * 100:.2f} % of a core |"
        )
    lines += [
        "",
        "| ranks | export setting | exporting ranks | preset | spans/s at the collector | MB/s at the collector | recommended |",
        "|---|---|---|---|---|---|---|",
    ]
    for ranks in SCALES:
        for setting in SETTINGS:
            exporting = exporting_ranks(setting, ranks)
            for name in PRESETS:
                p = presets[name]
                rate = exporting * spans_per_step(p, mb, layers) / step
                mbps = rate * p["bytes_per_span"] / 1e6
                lines.append(
                    f"| {ranks:,} | `{setting}` | {exporting:,} | {name} | {rate:,.0f} | {mbps:,.2f} | "
                    f"{recommend(rate, exporting)} |"
                )
    return "\n".join(lines) + "\n"


def recommend(rate: float, exporting: int) -> str:
    """The collector topology for ``rate`` spans/s from ``exporting`` ranks."""
    if rate == 0:
        return "nothing per step (startup, intervals, checkpoints only)"
    if rate < 5_000:
        return "one collector"
    if rate < 100_000:
        return "a collector per node (agent), one gateway"
    if exporting > 1:
        return (
            "agents, a load-balancing exporter (routing_key: traceID) to a gateway tier with tail "
            "sampling; or fewer ranks (`one-per:pp`, `every:N`)"
        )
    return "agents and a gateway tier"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.volume", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the measurements here (benchmarks/volume.json)")
    parser.add_argument(
        "--from-json", type=Path, help="render the table from these measurements, measure nothing"
    )
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    os.environ.setdefault("CODEGEN_CACHE_DIR", str(Path.home() / ".cache" / "megatron-otel-codegen"))
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    results = json.loads(args.from_json.read_text()) if args.from_json else measure()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    table = render_table(results)
    if args.markdown:
        args.markdown.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
