"""The cheap scan that decides which source files CPython's parser checks before libcst sees them."""

from __future__ import annotations

import pytest

from codegen.strip.hostile import LONG_LINE, MAX_BRACKET_DEPTH, suspicious

ORDINARY = "def work(x):\n    if not x:\n        return -x\n    return [(x, {x: x})]\n"


@pytest.mark.parametrize(
    "text",
    [
        "y = " + "-" * 100 + "x\n",
        "y = " + "+-~" * 34 + "x\n",
        "y = " + "not " * 100 + "x\n",
        "y = " + "not\n    " * 100 + "x\n",  # continuation lines count too
        "y = 1\n" + "z = '" + "a" * LONG_LINE + "'\n",
        "y = " + "(" * (MAX_BRACKET_DEPTH + 1) + "x" + ")" * (MAX_BRACKET_DEPTH + 1) + "\n",
        "y = " + "[{" * (MAX_BRACKET_DEPTH // 2 + 1) + "x" + "}]" * (MAX_BRACKET_DEPTH // 2 + 1) + "\n",
        "y = 1\n" * 200_000,  # over LARGE
    ],
    ids=[
        "minus-run",
        "mixed-run",
        "not-chain",
        "not-chain-lines",
        "long-line",
        "deep-parens",
        "deep-mixed",
        "large",
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
