"""``codegen verify`` over several ranks (``codegen/verify_ranks.py``): each cross-rank check finds
what it is there to find, on small hand-made captures written as OTLP JSON files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codegen.cli import main
from tests.support.otlp_json import attributes as _attributes

SPECS = Path(__file__).resolve().parents[2] / "specs"
_PLANS: dict[tuple[Any, ...], Any] = {}


@pytest.fixture(autouse=True)
def plan_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI resolves the specs once for the module (the same specs in every test)."""
    import codegen.pipeline

    plan_only = codegen.pipeline.plan_only

    def cached(*args: Any) -> Any:
        if args not in _PLANS:
            _PLANS[args] = plan_only(*args)
        return _PLANS[args]

    monkeypatch.setattr(codegen.pipeline, "plan_only", cached)


RUN = "0123456789abcdef0123456789abcdef"


def resource(rank: int, pp: int, **extra: Any) -> dict[str, Any]:
    return {
        "service.name": "megatron-lm",
        "dl.rank": rank,
        "dl.local_rank": rank,
        "host.name": "node0",
        "dl.tensor_parallel.rank": 0,
        "dl.pipeline_parallel.rank": pp,
        "dl.data_parallel.rank": 0,
        "dl.context_parallel.rank": 0,
        "dl.expert_parallel.rank": 0,
        "dl.world_size": 2,
        "dl.pipeline_parallel.size": 2,
        "megatron.run_id": RUN,
        "megatron.export_ranks": "all",
        **extra,
    }


def span(name: str, trace: str, span_id: str, group: str, parent: str | None = None, links=(), **attrs: Any):
    attributes = {"megatron.span_group": group, **attrs}
    if name in ("megatron.startup", "megatron.train"):
        attributes["is_goodput_span"] = True
    raw: dict[str, Any] = {
        "traceId": trace,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
        "attributes": _attributes(attributes),
        "status": {},
    }
    if parent:
        raw["parentSpanId"] = parent
    if links:
        raw["links"] = [{"traceId": t, "spanId": s, "attributes": _attributes(a)} for t, s, a in links]
    return raw


def document(rank_spans: dict[int, tuple[dict[str, Any], list[dict[str, Any]]]]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(res)},
                "scopeSpans": [{"scope": {"name": "megatron"}, "spans": spans}],
            }
            for res, spans in rank_spans.values()
        ]
    }


T_START, T_INT = "a" * 32, "b" * 32
SEND = "5" * 16


def two_stages(**change: Any) -> dict[int, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """A clean capture of two pipeline stages: startup, interval 0, a send and its receive."""
    p2p = {"megatron.p2p.direction": "forward", "megatron.p2p.seq": 0}
    interval = {"megatron.iteration": 0, "megatron.trace_interval": 0}
    ranks = {}
    for rank in (0, 1):
        start_id, train_id = f"{rank + 1}" * 16, f"{rank + 3}" * 16
        startup = change.get(f"startup{rank}", T_START)
        spans = [
            span("megatron.startup", startup, start_id, "job", **{"megatron.model_type": "gpt"}),
            span("megatron.train", T_INT, train_id, "job", **interval),
        ]
        if rank == 0:
            spans.append(
                span("megatron.p2p.send_forward", T_INT, change.get("send_id", SEND), "communication", train_id,
                     **p2p, **{"megatron.p2p.peer_rank": 1})
            )  # fmt: skip
        else:
            link = (T_INT, SEND, {**p2p, "megatron.p2p.peer_rank": 0})
            spans.append(
                span("megatron.p2p.recv_forward", T_INT, change.get("recv_id", "7" * 16), "communication", train_id,
                     links=() if change.get("no_link") else (link,), **p2p, **{"megatron.p2p.peer_rank": 0})
            )  # fmt: skip
        ranks[rank] = (resource(rank, rank, **change.get(f"resource{rank}", {})), spans)
    return ranks


def verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ranks, *, split: bool = False
) -> tuple[int, str]:
    files = {f"rank{rank}": {rank: entry} for rank, entry in ranks.items()} if split else {"capture": ranks}
    paths = []  # split: one file per rank
    for name, part in files.items():
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(document(part)) + "\n")
        paths.append(str(tmp_path / f"{name}.jsonl"))
    code = main(["verify", str(SPECS), *paths, "--groups", ""])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("split", [False, True])
def test_clean_two_rank_capture_passes(tmp_path, capsys, split):
    code, out = verify(tmp_path, capsys, two_stages(), split=split)
    assert code == 0, out
    assert out.strip().endswith("0 findings")


@pytest.mark.parametrize(
    ("change", "finding"),
    [
        ({"startup1": "c" * 32}, "the startup is in 2 traces, not one"),
        ({"send_id": "6" * 16}, "links to span 5555555555555555 of rank 0, not in the capture"),
        ({"no_link": True}, "receives from rank 0 but has no link to the send"),
        ({"recv_id": "1" * 16}, "span id 1111111111111111 is used twice"),
        (
            {"resource1": {"megatron.export_ranks": "all", "dl.world_size": 3}},
            "ranks [2] export under megatron.export_ranks='all' in a world of 3 but sent no spans",
        ),
        (
            {"resource1": {"dl.pipeline_parallel.rank": "1"}},
            "resource attribute 'dl.pipeline_parallel.rank' is '1'; the registry says int",
        ),
    ],
)
def test_each_cross_rank_check_finds_its_problem(tmp_path, capsys, change, finding):
    code, out = verify(tmp_path, capsys, two_stages(**change))
    assert code == 1
    assert finding in out, out


def test_missing_coordinates_are_a_finding(tmp_path, capsys):
    ranks = two_stages()
    res, _ = ranks[1]
    del res["host.name"]
    code, out = verify(tmp_path, capsys, ranks)
    assert code == 1 and "rank 1: the resource lacks host.name" in out


def test_a_link_to_a_rank_that_did_not_export_is_not_a_finding(tmp_path, capsys):
    ranks = two_stages()
    for rank in (0, 1):
        ranks[rank][0]["megatron.export_ranks"] = "1"
    del ranks[0]
    ranks[2] = (resource(2, 0, **{"megatron.export_ranks": "1"}), [])
    ranks[1][0]["dl.world_size"] = 2
    # one rank only: the plain single-rank verify; the link to rank 0 is not checked
    code, out = verify(tmp_path, capsys, {1: ranks[1]})
    assert code == 0, out
