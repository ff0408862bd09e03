"""resolve/hooks.py through the plan: where a hook's call goes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.plans import placed

SOURCE = '''\
def step(model, batch):
    """Docstring."""
    loss = model(batch)
    grad = loss.backward()
    return loss
'''
HEAD = "file: megatron/demo.py\nhooks:\n  - function: step\n"


@pytest.mark.parametrize(
    ("placement", "inserted"),
    [
        ("entry: true\n    call: otel.reset()", {"entry step": 3}),  # after the docstring
        ("before: {return: loss}\n    record: {demo.loss: loss}", {"statement step": 5}),  # before it
        ("after: {assign: loss}\n    call: otel.reset()", {"statement step": 4}),  # before the next
    ],
)
def test_a_hook_call_goes_where_its_placement_says(
    tmp_path: Path, placement: str, inserted: dict[str, int]
) -> None:
    assert placed(tmp_path, HEAD + f"    {placement}\n", SOURCE).inserts == inserted


def test_a_hook_on_an_unknown_statement_fails(tmp_path: Path) -> None:
    spec = HEAD + "    after: {assign: missing}\n    call: otel.reset()\n"
    result = placed(tmp_path, spec, SOURCE)
    assert result.inserts == {} and list(result.errors) == ["statement step"]
