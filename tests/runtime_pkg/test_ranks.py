"""The multi-rank parts of the runtime (``_ranks``): the export setting, coordinates, the shared
trace ids and the pipeline pairing, as plain functions (the end-to-end runs are in
``tests/megatron_cpu/test_multirank.py``)."""

from __future__ import annotations

import pytest

from codegen.otel_runtime import _ranks
from codegen.otel_runtime._ranks import (
    ChosenIds,
    Pipeline,
    coordinates_in_order,
    interval_trace_id,
    p2p_span_id,
    startup_trace_id,
)
from codegen.otel_runtime._rankspec import export_ranks_from, parse_export_ranks

WHERE = "MEGATRON_OTEL_EXPORT_RANKS"


def selected(text: str, world: int, sizes: dict[str, int] | None = None) -> list[int]:
    setting = parse_export_ranks(text, WHERE)
    return [r for r in range(world) if setting.selects(r, world, coordinates_in_order(r, world, sizes or {}))]


@pytest.mark.parametrize(
    ("text", "world", "sizes", "ranks"),
    [
        ("last", 8, None, [7]),
        ("LAST", 1, None, [0]),
        ("all", 4, None, [0, 1, 2, 3]),
        ("0,3", 4, None, [0, 3]),
        ("1-2, 5", 8, None, [1, 2, 5]),
        ("every:3", 8, None, [0, 3, 6]),
        ("every:1", 3, None, [0, 1, 2]),
        # tp 2, pp 2, dp 2 (world 8): rank = tp + 2 * (dp + 2 * pp)
        ("one-per:pp", 8, {"tp": 2, "pp": 2}, [0, 4]),
        ("one-per:dp", 8, {"tp": 2, "pp": 2}, [0, 2]),
        ("one-per:pp+dp", 8, {"tp": 2, "pp": 2}, [0, 2, 4, 6]),
        ("one-per:tp", 8, {"tp": 2, "pp": 2}, [0, 1]),
    ],
)
def test_export_setting_selects(
    text: str, world: int, sizes: dict[str, int] | None, ranks: list[int]
) -> None:
    assert selected(text, world, sizes) == ranks


@pytest.mark.parametrize(
    "text",
    [
        "",
        "first",
        "every:0",
        "every:x",
        "one-per:",
        "one-per:xp",
        "one-per:pp+pp",
        "3-1",
        "-2",
        "1,,2",
        "1.5",
    ],
)
def test_export_setting_errors_name_the_forms(text: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_export_ranks(text, "--otel-export-ranks")
    message = str(error.value)
    assert message.startswith(f"--otel-export-ranks={text!r} is not valid; valid forms: last, all,")
    assert "every:N" in message and "one-per:DIMS" in message


def test_a_listed_rank_outside_the_world_is_an_error() -> None:
    setting = parse_export_ranks("0,9", WHERE)
    with pytest.raises(
        ValueError, match=r"MEGATRON_OTEL_EXPORT_RANKS=0,9: no rank 9 in a world of 4; valid ranks: 0..3"
    ):
        setting.selects(0, 4, {})


def test_the_single_rank_setting_still_works_and_not_both() -> None:
    assert export_ranks_from(("last", WHERE), "last", ("2", "MEGATRON_OTEL_EXPORT_RANK"), "-1").ranks == (2,)
    assert export_ranks_from(("last", WHERE), "last", ("-1", "X"), "-1").kind == "last"
    assert export_ranks_from(("all", WHERE), "last", ("-1", "X"), "-1").kind == "all"
    with pytest.raises(ValueError, match="are both given"):
        export_ranks_from(("all", WHERE), "last", ("0", "MEGATRON_OTEL_EXPORT_RANK"), "-1")
    with pytest.raises(ValueError, match=r"MEGATRON_OTEL_EXPORT_RANK='-3' is not valid"):
        export_ranks_from(("last", WHERE), "last", ("-3", "MEGATRON_OTEL_EXPORT_RANK"), "-1")


def test_coordinates_follow_megatrons_default_order() -> None:
    # tp 2, cp 1, pp 2 in a world of 8: dp 2; rank 6 = tp 0 + 2 * (dp 1 + 2 * pp 1)
    assert coordinates_in_order(6, 8, {"tp": 2, "pp": 2}) == {"tp": 0, "cp": 0, "dp": 1, "pp": 1, "ep": 1 % 1}
    assert coordinates_in_order(5, 8, {"tp": 1, "pp": 2, "ep": 2})["ep"] == 1


def test_trace_ids_derive_from_the_run_id_and_the_interval() -> None:
    run, other = b"\x01" * 16, b"\x02" * 16
    assert interval_trace_id(run, 3) == interval_trace_id(run, 3)
    ids = {startup_trace_id(run), *(interval_trace_id(run, k) for k in range(50))}
    assert len(ids) == 51 and all(0 < i < 2**128 for i in ids)
    assert interval_trace_id(run, 0) != interval_trace_id(other, 0)
    assert 0 < p2p_span_id(run, 1, "forward", 0) < 2**64
    assert p2p_span_id(run, 1, "forward", 0) != p2p_span_id(run, 0, "forward", 0)


def test_chosen_ids_are_used_once_then_random() -> None:
    ids = ChosenIds()
    ids.choose(trace_id=7, span_id=9)
    assert (ids.generate_trace_id(), ids.generate_span_id()) == (7, 9)
    assert ids.generate_trace_id() != 7 and ids.generate_span_id() != 9
    assert len({ids.generate_span_id() for _ in range(1000)}) == 1000


def test_pipeline_sends_and_receives_pair_by_order() -> None:
    """Stage 0 (rank 0) and stage 1 (rank 2) of a pipeline: the k-th send of one is the k-th
    receive of the other, in each direction; the ends of the pipeline make no link."""
    first, last = Pipeline(rank=0, next_rank=2, prev_rank=None), Pipeline(rank=2, next_rank=None, prev_rank=0)
    sends = [first.transfer("megatron.p2p.send_forward") for _ in range(3)]
    receives = [last.transfer("megatron.p2p.recv_forward") for _ in range(3)]
    for k, ((sender, sent, _), (none, got, link)) in enumerate(zip(sends, receives)):
        assert sender == 0 and none is None and link == (0, k)
        assert sent == {
            "megatron.p2p.direction": "forward",
            "megatron.p2p.seq": k,
            "megatron.p2p.peer_rank": 2,
        }
        assert got == {
            "megatron.p2p.direction": "forward",
            "megatron.p2p.seq": k,
            "megatron.p2p.peer_rank": 0,
        }
    assert last.transfer("megatron.p2p.send_backward")[0] == 2
    assert first.transfer("megatron.p2p.recv_backward")[2] == (2, 0)
    # the first stage's recv_forward and the last stage's send_forward do not communicate
    assert first.transfer("megatron.p2p.recv_forward")[2] is None
    assert last.transfer("megatron.p2p.send_forward")[0] is None


def test_run_id_without_torch_distributed_is_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "torch.distributed", None)
    assert len(_ranks.agree_run_id(4)) == 16
    assert _ranks.agree_run_id(1) != _ranks.agree_run_id(1)
