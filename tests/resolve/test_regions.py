"""resolve/regions.py through the plan: the statements an ``around:`` selector covers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.plans import placed, span_spec

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


@pytest.mark.parametrize(
    ("around", "lines"),
    [
        ("{call: prepare}", (2, 2)),  # a call: its statement
        ("{assign: setup}", (2, 2)),  # an assignment: its statement
        ("{call: loss.backward}", (5, 5)),  # a call inside a loop: that statement, not the loop
        ("{for: batch in data}", (3, 5)),  # a loop: whole
        ("{from: {call: prepare}, to: {if: setup}}", (2, 9)),  # from/to: inclusive
    ],
)
def test_a_selector_covers_its_statements(tmp_path: Path, around: str, lines: tuple[int, int]) -> None:
    assert placed(tmp_path, span_spec("train", around), SOURCE).wraps == {"demo.s": lines}


def test_a_selector_matching_nothing_fails_the_span(tmp_path: Path) -> None:
    result = placed(tmp_path, span_spec("train", "{call: evaluate}"), SOURCE)
    assert result.wraps == {} and "evaluate" in " ".join(result.errors["demo.s"])


def test_a_selector_matching_twice_fails_until_an_occurrence_picks_one(tmp_path: Path) -> None:
    source = SOURCE.replace("        skip(model)", "        prepare(model)")
    ambiguous = placed(tmp_path / "a", span_spec("train", "{call: prepare}"), source)
    assert ambiguous.wraps == {} and ambiguous.errors["demo.s"]
    second = placed(tmp_path / "b", span_spec("train", "{call: prepare, occurrence: 2}"), source)
    assert second.wraps == {"demo.s": (9, 9)}
