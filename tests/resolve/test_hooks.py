"""resolve/hooks.py through the plan: where a hook's call goes."""

from __future__ import annotations

from pathlib import Path

from tests.support.plans import placed

SOURCE = '''\
def step(model, batch):
    """Docstring."""
    loss = model(batch)
    grad = loss.backward()
    return loss
'''
HEAD = "file: megatron/demo.py\nhooks:\n  - function: step\n"


def test_an_entry_hook_goes_after_the_docstring(tmp_path: Path) -> None:
    assert placed(tmp_path, HEAD + "    entry: true\n    call: otel.reset()\n", SOURCE).inserts == {
        "entry step": 3
    }


def test_a_before_hook_goes_before_its_statement(tmp_path: Path) -> None:
    spec = HEAD + "    before: {return: loss}\n    record: {demo.loss: loss}\n"
    assert placed(tmp_path, spec, SOURCE).inserts == {"statement step": 5}


def test_an_after_hook_goes_before_the_next_statement(tmp_path: Path) -> None:
    spec = HEAD + "    after: {assign: loss}\n    call: otel.reset()\n"
    assert placed(tmp_path, spec, SOURCE).inserts == {"statement step": 4}


def test_a_hook_on_an_unknown_statement_fails(tmp_path: Path) -> None:
    spec = HEAD + "    after: {assign: missing}\n    call: otel.reset()\n"
    result = placed(tmp_path, spec, SOURCE)
    assert result.inserts == {} and list(result.errors) == ["statement step"]
