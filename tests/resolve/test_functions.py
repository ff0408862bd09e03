"""resolve/functions.py through the plan: which function a span's ``function:`` names."""

from __future__ import annotations

from pathlib import Path

from tests.support.plans import placed

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


def _spec(function: str) -> str:
    return f"file: megatron/demo.py\nspans:\n  - {{name: demo.s, group: step, function: {function}}}\n"


def test_a_module_level_function_is_wrapped_whole(tmp_path: Path) -> None:
    assert placed(tmp_path, _spec("work"), SOURCE).wraps == {"demo.s": (2, 2)}


def test_a_method_is_named_class_dot_method(tmp_path: Path) -> None:
    assert placed(tmp_path, _spec("Model.forward"), SOURCE).wraps == {"demo.s": (7, 7)}


def test_a_nested_class_method_is_named_by_its_full_path(tmp_path: Path) -> None:
    assert placed(tmp_path, _spec("Model.Inner.step"), SOURCE).wraps == {"demo.s": (11, 11)}


def test_an_unknown_function_fails_the_span_naming_it_and_the_file(tmp_path: Path) -> None:
    result = placed(tmp_path, _spec("forward"), SOURCE)
    assert result.wraps == {}
    (message,) = result.errors["demo.s"]
    assert "'forward'" in message and "megatron/demo.py" in message


def test_a_function_defined_twice_is_refused(tmp_path: Path) -> None:
    source = SOURCE + "\n\ndef work(x):\n    return x - 1\n"
    result = placed(tmp_path, _spec("work"), source)
    assert result.wraps == {} and list(result.errors) == ["demo.s"]
