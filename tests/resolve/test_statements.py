"""resolve/statements.py and alternatives.py through the plan: ``within:``, ``body:``/``branch:``
and ``any:`` narrow or widen what a selector matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.plans import placed, span_spec

SOURCE = """\
def train(model, data, skip):
    log(model)
    while model.running:
        log(model)
        if skip:
            pass
        else:
            step(model)
            log(model)
    return model
"""


@pytest.mark.parametrize(
    ("around", "lines"),
    [
        # within: the match inside the named statement
        ("{call: log, within: {while: model.running}, occurrence: 1}", (4, 4)),
        # body and branch: a branch of an if
        ("\n      body: {if: skip}\n      branch: else", (8, 9)),
        # any: the alternative the code has
        ("{any: [{call: evaluate}, {call: step}]}", (8, 8)),
    ],
)
def test_a_narrowed_or_alternative_selector_covers_its_statements(
    tmp_path: Path, around: str, lines: tuple[int, int]
) -> None:
    assert placed(tmp_path, span_spec("train", around), SOURCE).wraps == {"demo.s": lines}


@pytest.mark.parametrize(
    "around",
    [
        "{call: log}",  # without within, the same call three times: ambiguous
        "{any: [{call: evaluate}, {call: validate}]}",  # no alternative present
    ],
)
def test_a_selector_that_does_not_pick_one_statement_fails(tmp_path: Path, around: str) -> None:
    result = placed(tmp_path, span_spec("train", around), SOURCE)
    assert result.wraps == {} and result.errors["demo.s"]
