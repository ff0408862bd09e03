"""The cheap scan that decides which source files CPython's parser checks before libcst sees them."""

from __future__ import annotations

import pytest

from codegen.strip.hostile import LONG_LINE, MAX_BRACKET_DEPTH, suspicious

ORDINARY = "def work(x):\n    if not x:\n        return -x\n    return [(x, {x: x})]\n"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("y = " + "-" * 100 + "x\n", id="minus-run"),
        pytest.param("y = " + "+-~" * 34 + "x\n", id="mixed-run"),
        pytest.param("y = " + "not " * 100 + "x\n", id="not-chain"),
        # continuation lines count too
        pytest.param("y = " + "not\n    " * 100 + "x\n", id="not-chain-lines"),
        pytest.param("y = 1\n" + "z = '" + "a" * LONG_LINE + "'\n", id="long-line"),
        pytest.param(
            "y = " + "(" * (MAX_BRACKET_DEPTH + 1) + "x" + ")" * (MAX_BRACKET_DEPTH + 1) + "\n",
            id="deep-parens",
        ),
        pytest.param(
            "y = " + "[{" * (MAX_BRACKET_DEPTH // 2 + 1) + "x" + "}]" * (MAX_BRACKET_DEPTH // 2 + 1) + "\n",
            id="deep-mixed",
        ),
        pytest.param("y = 1\n" * 200_000, id="large"),  # over LARGE
    ],
)
def test_pathological_text_is_suspicious(text: str) -> None:
    assert suspicious(text)


@pytest.mark.parametrize(
    "text",
    [
        ORDINARY,
        ORDINARY * 500,  # many brackets and 'not's, none deep or chained
        "y = " + "-" * 99 + "x\n",
        "y = " + "not " * 99 + "x\n",
        "z = '" + "a" * (LONG_LINE - 10) + "'\n",
        "y = " + "(" * MAX_BRACKET_DEPTH + "x" + ")" * MAX_BRACKET_DEPTH + "\n",
        "# " + "-" * 99 + "\n" + "# " + "-" * 99 + "\n",
    ],
    ids=["ordinary", "ordinary-x500", "99-minus", "99-not", "long-but-fine", "at-depth-limit", "rulers"],
)
def test_ordinary_text_is_not_suspicious(text: str) -> None:
    assert not suspicious(text)
