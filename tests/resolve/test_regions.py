"""resolve/regions.py through the plan: the statements an ``around:`` selector covers."""

from __future__ import annotations

from pathlib import Path

from tests.support.plans import placed

SOURCE = """\
def train(model, data):
    setup = prepare(model)
    for batch in data:
        loss = model(batch)
        loss.backward()
    if setup:
        save(model)
    else:
        skip(model)
    return finish(model)
"""


def _spec(around: str) -> str:
    return (
        "file: megatron/demo.py\nspans:\n"
        f"  - name: demo.s\n    group: step\n    function: train\n    around: {around}\n"
    )


def test_a_call_selects_its_statement(tmp_path: Path) -> None:
    assert placed(tmp_path, _spec("{call: prepare}"), SOURCE).wraps == {"demo.s": (2, 2)}


def test_an_assignment_selects_its_statement(tmp_path: Path) -> None:
    assert placed(tmp_path, _spec("{assign: setup}"), SOURCE).wraps == {"demo.s": (2, 2)}


def test_a_call_within_a_loop_selects_the_statement_inside_the_loop(tmp_path: Path) -> None:
    assert placed(tmp_path, _spec("{call: loss.backward}"), SOURCE).wraps == {"demo.s": (5, 5)}


def test_a_for_loop_is_selected_whole(tmp_path: Path) -> None:
    assert placed(tmp_path, _spec("{for: batch in data}"), SOURCE).wraps == {"demo.s": (3, 5)}


def test_from_to_covers_the_statements_between_inclusive(tmp_path: Path) -> None:
    around = "{from: {call: prepare}, to: {if: setup}}"
    assert placed(tmp_path, _spec(around), SOURCE).wraps == {"demo.s": (2, 9)}


def test_a_selector_matching_nothing_fails_the_span(tmp_path: Path) -> None:
    result = placed(tmp_path, _spec("{call: evaluate}"), SOURCE)
    assert result.wraps == {} and "evaluate" in " ".join(result.errors["demo.s"])


def test_a_selector_matching_twice_fails_until_an_occurrence_picks_one(tmp_path: Path) -> None:
    source = SOURCE.replace("        skip(model)", "        prepare(model)")
    ambiguous = placed(tmp_path / "a", _spec("{call: prepare}"), source)
    assert ambiguous.wraps == {} and ambiguous.errors["demo.s"]
    second = placed(tmp_path / "b", _spec("{call: prepare, occurrence: 2}"), source)
    assert second.wraps == {"demo.s": (9, 9)}
