"""Serving rows (issue 40): the dynamic inference server's request latency on localhost with the
stand-in engine, instrumented (telemetry off, ``default``, ``all``) against the pristine
megatron-core 0.19.2; and a disabled async span against an uninstrumented coroutine call.

The servers are ``tests/megatron_cpu/serving_worker.py`` (the tree's own Quart app on hypercorn,
the real InferenceClient over ZMQ to a stand-in engine answering after ``DELAY_MS``: a 50 ms
request). All four run at once; each round sends one completion request to each, in a shuffled
order, one at a time, so a round slowed by the machine slows every arm. Needs torch, Quart,
hypercorn, pyzmq and msgpack (tox -e runtime's packages).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DELAY_MS = 50.0
ARMS = {"pristine": None, "off": None, "default": "default", "all": "all"}

MICRO = """
import json, sys
sys.path.insert(0, {repo!r})
from benchmarks.timing import Variant, measure
from megatron.core import otel

async def plain():
    return 1

@otel.traced("text_completion")
async def traced():
    return 1

def drive(fn):
    coroutine = fn()
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value

results = measure([Variant("plain", drive, (plain,)), Variant("traced_off", drive, (traced,))], {rounds}, 0.02)
print(json.dumps({{name: r.as_json() for name, r in results.items()}}))
"""


def _trees(tmp: Path) -> tuple[Path, Path]:
    from codegen.emit.tree import write_tree
    from codegen.pipeline import generate

    generation = generate(REPO / "specs")
    fork = tmp / "fork"
    write_tree(fork, {p: new for p, (_old, new) in generation.changes.items()}, base=generation.source_root)
    return generation.source_root, fork


def run(rounds: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from tests.megatron_cpu.serving import CASES, Server

    case = CASES["completion"]
    with tempfile.TemporaryDirectory(prefix="otel-serve-") as name:
        tmp = Path(name)
        pristine, fork = _trees(tmp)
        servers = {}
        try:
            for arm, groups in ARMS.items():
                # telemetry on as a server sets it up: spans and metrics recorded, exported by the
                # runtime (console, on its export threads; the tests' capture writes a file per span)
                env = (
                    None
                    if groups is None
                    else {
                        "MEGATRON_OTEL_ENABLED": "1",
                        "MEGATRON_OTEL_SPAN_GROUPS": groups,
                        "MEGATRON_OTEL_EXPORTER": "console",
                        "SERVING_WORKER_CAPTURE": "0",
                    }
                )
                root = pristine if arm == "pristine" else fork
                servers[arm] = Server(root, tmp / arm, env=env, delay_ms=DELAY_MS)
            for server in servers.values():  # warm: first requests import and compile
                for _ in range(3):
                    server.post(case)
            latency: dict[str, list[float]] = {arm: [] for arm in servers}
            rng = random.Random(0)
            order = list(servers)
            for _ in range(rounds):
                rng.shuffle(order)
                for arm in order:
                    start = time.perf_counter()
                    reply = servers[arm].post(case)
                    latency[arm].append(time.perf_counter() - start)
                    assert reply.status == 200, reply.body[:200]
        finally:
            for server in servers.values():
                server.stop()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
        env.update(PYTHONPATH=str(fork), PYTHONWARNINGS="ignore")
        code = MICRO.format(repo=str(REPO), rounds=max(10, rounds // 2))
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the async-span micro run failed:\n{proc.stderr[-2000:]}")
        micro = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "latency_s": latency,
        "micro": micro,
        "rounds": rounds,
        "delay_ms": DELAY_MS,
        "load": os.getloadavg(),
    }


def paired(data: dict[str, Any], arm: str, base: str) -> tuple[float, float, float]:
    """Median of the per-round differences (s), median ratio, and the median base latency."""
    a, b = data["latency_s"][arm], data["latency_s"][base]
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return statistics.median(diffs), statistics.median(ratios), statistics.median(b)
