"""resolve/functions.py through the plan: which function a span's ``function:`` names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.plans import placed, span_spec

SOURCE = """\
def work(x):
    return x + 1


class Model:
    def forward(self, x):
        return x * 2

    class Inner:
        def step(self):
            return 0
"""


@pytest.mark.parametrize(
    ("function", "lines"),
    [
        ("work", (2, 2)),  # a module-level function, wrapped whole
        ("Model.forward", (7, 7)),  # a method: Class.method
        ("Model.Inner.step", (11, 11)),  # a nested class's method: its full path
    ],
)
def test_the_named_function_is_wrapped_whole(tmp_path: Path, function: str, lines: tuple[int, int]) -> None:
    assert placed(tmp_path, span_spec(function), SOURCE).wraps == {"demo.s": lines}


def test_an_unknown_function_fails_the_span_naming_it_and_the_file(tmp_path: Path) -> None:
    result = placed(tmp_path, span_spec("forward"), SOURCE)
    assert result.wraps == {}
    (message,) = result.errors["demo.s"]
    assert "'forward'" in message and "megatron/demo.py" in message


def test_a_function_defined_twice_is_refused(tmp_path: Path) -> None:
    source = SOURCE + "\n\ndef work(x):\n    return x - 1\n"
    result = placed(tmp_path, span_spec("work"), source)
    assert result.wraps == {} and list(result.errors) == ["demo.s"]
