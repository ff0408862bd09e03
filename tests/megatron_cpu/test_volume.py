"""Many exporting processes into one live receiver (issue 18's volume test), and the volume table
in the manual (docs/guide/many-ranks.md) re-rendered from the committed measurements (``benchmarks/volume.json``).

``N_RANKS`` processes each configure the runtime as rank r of N with ``MEGATRON_OTEL_EXPORT_RANKS=all``
and record ``SPANS_PER_RANK`` spans (the taxonomy's names replayed) through its own OTLP/HTTP export
path into one receiver that counts spans per rank (resource ``dl.rank``) and keeps nothing else.
Checked: nothing lost (every rank's count equals what it recorded), the requests stay within the
batch size, and the receiver's memory does not grow with what it received.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

for _module in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter", "psutil"):
    pytest.importorskip(_module, reason=f"{_module} is needed for the OTLP volume test")

import psutil

from tests.megatron_cpu.otlp_receiver import OtlpReceiver
from tests.support.modules import with_pythonpath

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "volume_worker.py"
N_RANKS = 8
# Enough that what arrives after the first quarter (about 32 MB) dwarfs what a receiver holds in
# flight (one full request per rank, decoded, and the allocator warming up: 1-2 MB). With 6,000 a
# rank (96 full requests) the bound below was of the same size as that and failed about once in
# three runs; a receiver keeping every request grows by about 3.5 times what arrived.
SPANS_PER_RANK = 32_000
BATCH = 512  # OTEL_BSP_MAX_EXPORT_BATCH_SIZE's default


class CountingReceiver(OtlpReceiver):
    """Counts the spans of each rank and the size of each request; stores no request body."""

    def __init__(self) -> None:
        super().__init__("http", max_requests=100_000)
        self.counts: collections.Counter[int] = collections.Counter()
        self.request_spans: list[int] = []
        self.request_bytes: list[int] = []
        self.samples: list[tuple[int, int]] = []  # (bytes received so far, RSS) per request
        self._count_lock = threading.Lock()

    def _answer(self, signal: str, decode: Any, arrived: str | None = None) -> tuple[str, float]:
        if decode is None or signal != "traces":
            return super()._answer(signal, decode, arrived)

        def count() -> None:
            message = decode()
            spans = 0
            for resource_spans in message.resource_spans:
                rank = next(
                    (a.value.int_value for a in resource_spans.resource.attributes if a.key == "dl.rank"), -1
                )
                number = sum(len(scope.spans) for scope in resource_spans.scope_spans)
                spans += number
                with self._count_lock:
                    self.counts[rank] += number
            with self._count_lock:
                self.request_spans.append(spans)
                self.request_bytes.append(message.ByteSize())
                self.samples.append((sum(self.request_bytes), psutil.Process().memory_info().rss))
            # nothing kept

        return super()._answer(signal, count, arrived)


def test_many_ranks_into_one_receiver_nothing_lost_memory_bounded():
    process = psutil.Process()
    with CountingReceiver() as receiver:
        before = process.memory_info().rss
        env = {
            k: v for k, v in __import__("os").environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))
        }
        env.update(receiver.environ(), PYTHONWARNINGS="ignore")
        env = with_pythonpath(REPO, env=env)
        command = [sys.executable, str(WORKER), "--world-size", str(N_RANKS), "--spans", str(SPANS_PER_RANK)]
        procs = [
            subprocess.Popen(
                [*command, "--rank", str(rank)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank in range(N_RANKS)
        ]
        recorded = {}
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            result = json.loads(out.strip().splitlines()[-1])
            recorded[result["rank"]] = result["recorded"]
    assert recorded == {rank: SPANS_PER_RANK for rank in range(N_RANKS)}
    assert dict(receiver.counts) == recorded  # nothing lost, nothing twice, per rank
    assert max(receiver.request_spans) <= BATCH
    received = sum(receiver.request_bytes)
    peak = max(rss for _, rss in receiver.samples)
    # from the first quarter of the requests to the end: what arrived meanwhile, how RSS grew
    mark = receiver.samples[len(receiver.samples) // 4]
    later_bytes, later_growth = received - mark[0], peak - mark[1]
    print(
        f"\n{N_RANKS} ranks x {SPANS_PER_RANK} spans: {len(receiver.request_spans)} requests, "
        f"{received / 1e6:.1f} MB of OTLP protobuf ({received / sum(recorded.values()):.0f} B/span), "
        f"largest request {max(receiver.request_bytes) / 1e3:.0f} kB; receiver RSS growth "
        f"{(peak - before) / 1e6:.1f} MB in all, {later_growth / 1e6:.1f} MB while the last "
        f"{later_bytes / 1e6:.1f} MB arrived"
    )
    # the receiver holds only the requests in flight: it does not grow with what it received
    assert later_growth < later_bytes / 4, (later_growth, later_bytes)


def test_readme_volume_table_is_rendered_from_the_measurements():
    from benchmarks.volume import render_table

    measured = json.loads((REPO / "benchmarks" / "volume.json").read_text())
    page = (REPO / "docs" / "guide" / "many-ranks.md").read_text()
    block = re.search(r"<!-- volume-table -->\n(.*?)<!-- /volume-table -->", page, re.DOTALL)
    assert block is not None, "docs/guide/many-ranks.md has no volume table"
    assert block.group(1) == render_table(measured)
