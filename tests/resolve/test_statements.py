"""resolve/statements.py and alternatives.py through the plan: ``within:``, ``body:``/``branch:``
and ``any:`` narrow or widen what a selector matches."""

from __future__ import annotations

from pathlib import Path

from tests.support.plans import placed

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


def _spec(around: str) -> str:
    return (
        "file: megatron/demo.py\nspans:\n"
        f"  - name: demo.s\n    group: step\n    function: train\n    around: {around}\n"
    )


def test_within_picks_the_match_inside_the_named_statement(tmp_path: Path) -> None:
    around = "{call: log, within: {while: model.running}, occurrence: 1}"
    assert placed(tmp_path, _spec(around), SOURCE).wraps == {"demo.s": (4, 4)}


def test_without_within_the_same_call_is_ambiguous(tmp_path: Path) -> None:
    result = placed(tmp_path, _spec("{call: log}"), SOURCE)
    assert result.wraps == {} and result.errors["demo.s"]


def test_body_and_branch_cover_a_branch_of_an_if(tmp_path: Path) -> None:
    around = "\n      body: {if: skip}\n      branch: else"
    assert placed(tmp_path, _spec(around), SOURCE).wraps == {"demo.s": (8, 9)}


def test_any_takes_the_alternative_the_code_has(tmp_path: Path) -> None:
    around = "{any: [{call: evaluate}, {call: step}]}"
    assert placed(tmp_path, _spec(around), SOURCE).wraps == {"demo.s": (8, 8)}


def test_any_with_no_alternative_present_fails(tmp_path: Path) -> None:
    result = placed(tmp_path, _spec("{any: [{call: evaluate}, {call: validate}]}"), SOURCE)
    assert result.wraps == {} and result.errors["demo.s"]
