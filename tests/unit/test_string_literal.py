"""The one string-literal helper: no text from a spec can end the literal or its line."""

from __future__ import annotations

import ast

import pytest

from codegen.layout import quote


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        'a "quote" and \\ backslash',
        "line\nbreak\r\n\ttab",
        "\x00\x1f\x7f\x85\u2028\u2029",
        "é ✓ 😀",
        "",
    ],
)
def test_quote_round_trips_on_one_line(text: str) -> None:
    literal = quote(text)
    assert ast.literal_eval(literal) == text
    assert len(literal.splitlines()) <= 1
    assert literal.startswith('"') and literal.endswith('"')


def test_printable_text_is_kept_as_is() -> None:
    assert quote("megatron.layer.forward") == '"megatron.layer.forward"'
    assert quote("é ✓") == '"é ✓"'
