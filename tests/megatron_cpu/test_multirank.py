"""Every rank in one trace: megatron.training's own ``pretrain()`` on CPU (gloo), several ranks
exporting over OTLP/HTTP to one live receiver per run (``MEGATRON_OTEL_EXPORT_RANKS=all``).

Runs (``RUNS``): data parallel 2; pipeline parallel 2, saving; the same resumed from its last
checkpoint; pipeline 2 x data parallel 2 (4 processes). Checked: every rank's spans arrive with its
coordinates in the resource; the startup and every training interval is one trace across ranks
(fresh and resumed, the resumed one numbering on); every pipeline receive links to its send on
the neighbouring stage; ``codegen verify`` over the multi-rank capture: 0 findings; and the default
setting still exports from one rank only.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

for _module in (
    "torch",
    "triton",
    "numpy",
    "pybind11",
    "psutil",
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
):
    pytest.importorskip(_module, reason=f"{_module} is needed to run megatron.training on CPU over OTLP")

from codegen.capture import read_spans
from codegen.cli import main
from tests.megatron_cpu.otlp_receiver import OtlpReceiver
from tests.megatron_cpu.pretrain_harness import MODEL_ARGV, OBSERVED, PP_ARGV, Config, finish, start
from tests.support.ports import free_port

SPECS = Path(__file__).resolve().parents[2] / "specs"
ALL = (("MEGATRON_OTEL_EXPORT_RANKS", "all"),)
PP = ("--pipeline-model-parallel-size", "2")
LOOP = ("--save-interval", "2", "--eval-interval", "2", "--num-workers", "0")


def _live(*argv: str, ranks: int = 2, **options: Any) -> Config:
    """All groups, every rank exporting over OTLP to the run's receiver."""
    return Config("all", (*MODEL_ARGV, *argv), ranks=ranks, env=ALL, live=True, **options)


RUNS: dict[str, Config] = {
    # data parallel 2: two intervals of two iterations
    "dp": _live(*LOOP, "--train-iters", "4"),
    # pipeline parallel 2, checkpoints at 2 and 4; two microbatches per iteration
    "pp": _live(*PP, *LOOP, "--train-iters", "4", save=True),
    # resumed at iteration 4, trained to 6: interval 2
    "pp_resume": _live(*PP, *LOOP, "--train-iters", "6", "--override-opt_param-scheduler", load="pp"),
    # pipeline 2 x data parallel 2 (rank = dp + 2 * pp): two microbatches per replica
    "pp_dp": _live(*PP, *LOOP, "--train-iters", "2", "--global-batch-size", "8", ranks=4),
    # the default export setting (the last rank only), the run of test_pretrain_cpu.py's "pp"
    "pp_default": Config("all", PP_ARGV, ranks=2, live=True),
}
# Each run's rank -> (pipeline stage, data-parallel replica).
COORDS = {
    "dp": {0: (0, 0), 1: (0, 1)},
    "pp": {0: (0, 0), 1: (1, 0)},
    "pp_resume": {0: (0, 0), 1: (1, 0)},
    "pp_dp": {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)},
    "pp_default": {1: (1, 0)},
}
INTERVALS = {"dp": [0, 1], "pp": [0, 1], "pp_resume": [2], "pp_dp": [0]}


@pytest.fixture(scope="module")
def runs(fork_root, dataset_helpers, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Each run of ``RUNS`` (one after the other), its receiver's spans written as a capture.

    ``MEGATRON_CPU_MULTIRANK_DIR=DIR`` keeps the runs in DIR and, when DIR already holds a run's
    capture, checks it again instead of running (for working on the tests, never set in CI).
    """
    keep = os.environ.get("MEGATRON_CPU_MULTIRANK_DIR")
    work = Path(keep) if keep else tmp_path_factory.mktemp("multirank")
    out: dict[str, dict[str, Any]] = {}
    for name, config in RUNS.items():
        capture = work / name / "capture.jsonl"
        if keep and capture.exists():
            out[name] = {"capture": capture, "spans": read_spans(capture)}
            continue
        with OtlpReceiver("http") as receiver:
            env = (*config.env, *receiver.environ().items(), ("MEGATRON_OTEL_FLUSH_TIMEOUT_S", "30"))
            run, procs = start(
                name,
                dataclasses.replace(config, env=env),
                {"fork": fork_root},
                dataset_helpers,
                work,
                free_port(),
            )
            finish(run, procs)
            run.check()
            lines = [json.dumps(receiver.traces()), json.dumps(receiver.metrics())]
            capture.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out[name] = {"capture": capture, "spans": read_spans(capture)}
    return out


def _ranks(spans) -> dict[int, list]:
    by_rank = collections.defaultdict(list)
    for span in spans:
        by_rank[span.resource.get("dl.rank")].append(span)
    return by_rank


@pytest.mark.parametrize("name", RUNS)
def test_every_exporting_rank_present_with_its_coordinates(runs, name):
    by_rank = _ranks(runs[name]["spans"])
    assert sorted(by_rank) == sorted(COORDS[name])
    for rank, (stage, replica) in COORDS[name].items():
        resources = {json.dumps(s.resource, sort_keys=True) for s in by_rank[rank]}
        assert len(resources) == 1, f"rank {rank} has {len(resources)} resources"
        resource = by_rank[rank][0].resource
        assert resource["dl.local_rank"] == rank and resource["host.name"]
        assert resource["dl.pipeline_parallel.rank"] == stage
        assert resource["dl.data_parallel.rank"] == replica
        assert resource["dl.tensor_parallel.rank"] == resource["dl.context_parallel.rank"] == 0
        assert resource["dl.world_size"] == RUNS[name].ranks
        assert len({s.name for s in by_rank[rank]}) > 20  # the whole taxonomy the rank reaches


@pytest.mark.parametrize("name", [n for n in RUNS if n != "pp_default"])
def test_one_trace_per_interval_across_ranks(runs, name):
    spans = runs[name]["spans"]
    ranks = sorted(COORDS[name])
    startup = [s for s in spans if s.name == "megatron.startup"]
    assert sorted(s.resource["dl.rank"] for s in startup) == ranks
    assert len({s.trace_id for s in startup}) == 1
    assert len({s.resource["megatron.run_id"] for s in spans}) == 1
    intervals = collections.defaultdict(list)
    for span in spans:
        if span.name == "megatron.train":
            intervals[span.attributes["megatron.trace_interval"]].append(span)
    assert sorted(intervals) == INTERVALS[name]
    traces = set()
    for index, roots in intervals.items():
        assert sorted(s.resource["dl.rank"] for s in roots) == ranks, index
        assert len({s.trace_id for s in roots}) == 1, f"interval {index}: {len(roots)} roots"
        assert all(s.parent_id is None for s in roots)
        traces.add(roots[0].trace_id)
        # every iteration of the interval on every rank is in that trace
        for span in spans:
            if (
                span.name == "megatron.train.iteration"
                and span.attributes["megatron.iteration"] // 2 == index
            ):
                assert span.trace_id == roots[0].trace_id
    assert len(traces) == len(intervals) and startup[0].trace_id not in traces


def test_resume_is_a_new_run_numbering_on(runs):
    first = {s.resource["megatron.run_id"] for s in runs["pp"]["spans"]}
    resumed = runs["pp_resume"]["spans"]
    assert first.isdisjoint({s.resource["megatron.run_id"] for s in resumed})
    iterations = sorted(
        {s.attributes["megatron.iteration"] for s in resumed if s.name == "megatron.train.iteration"}
    )
    assert iterations == [4, 5]


@pytest.mark.parametrize("name", ["pp", "pp_resume", "pp_dp"])
def test_every_pipeline_receive_links_to_its_send(runs, name):
    spans = runs[name]["spans"]
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    receives = [
        s
        for s in spans
        if s.name.startswith("megatron.p2p.recv") and "megatron.p2p.peer_rank" in s.attributes
    ]
    directions = collections.Counter(s.attributes["megatron.p2p.direction"] for s in receives)
    assert directions["forward"] > 0 and directions["backward"] > 0, directions
    for span in receives:
        (link,) = span.links
        send = by_id.get((link.trace_id, link.span_id))
        assert send is not None, f"{span.source}: {span.name} links to nothing"
        direction = span.attributes["megatron.p2p.direction"]
        assert send.name == f"megatron.p2p.send_{direction}"
        assert send.resource["dl.rank"] == span.attributes["megatron.p2p.peer_rank"]
        assert send.attributes["megatron.p2p.peer_rank"] == span.resource["dl.rank"]
        assert send.attributes["megatron.p2p.seq"] == span.attributes["megatron.p2p.seq"]
        assert send.end_ns >= span.start_ns - 10**9  # the same transfer: overlapping in time
        stage = span.resource["dl.pipeline_parallel.rank"]
        assert send.resource["dl.pipeline_parallel.rank"] == (
            stage - 1 if direction == "forward" else stage + 1
        )
        assert send.resource["dl.data_parallel.rank"] == span.resource["dl.data_parallel.rank"]


@pytest.mark.parametrize("name", RUNS)
def test_codegen_verify_over_the_multi_rank_capture(runs, name, capsys):
    code = main(["verify", str(SPECS), str(runs[name]["capture"]), "--groups", ""])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 findings" in out


def test_span_ids_unique_across_ranks(runs):
    for name, run in runs.items():
        ids = collections.Counter(s.span_id for s in run["spans"])
        assert ids.most_common(1)[0][1] == 1, name


def test_default_setting_exports_from_the_last_rank_only(runs):
    """As before multi-rank export: the last rank, the same span names as test_pretrain_cpu's
    "pp" run (which captures through its own providers, not OTLP)."""
    spans = runs["pp_default"]["spans"]
    assert {s.resource["dl.rank"] for s in spans} == {1}
    assert {s.resource["megatron.export_ranks"] for s in spans} == {"last"}
    assert {s.name for s in spans} == OBSERVED["pp"]
    # no link without the first stage's sends in the capture: verify does not ask for them
    assert any(s.links for s in spans if s.name == "megatron.p2p.recv_forward")
