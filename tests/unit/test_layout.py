"""codegen/layout.py, the one place generated code is laid out: what it writes is what black would
write, at every width around the line length, and nothing else in the generator lays code out on
its own."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from codegen.layout import (
    LINE_LENGTH,
    Code,
    DictArg,
    Frozen,
    Record,
    call_statement,
    code_of,
    expression_statement,
    fit,
    fit_call_line,
    fold,
    guarded_assignment,
    literal,
    one_line,
    statement,
)

black = pytest.importorskip("black", reason="black is in the test extra (tox -e test)")

MODE = black.Mode(line_length=LINE_LENGTH, string_normalization=False)
CODEGEN = Path(__file__).resolve().parents[2] / "codegen"
_LAYOUT_NAMES = ("code_of", "quote", "literal")


def black_stable(code: str) -> None:
    """``code`` (a statement or module, no trailing newline needed) is black's own output and no
    line is longer than the limit."""
    text = code if code.endswith("\n") else code + "\n"
    assert black.format_str(text, mode=MODE) == text, text
    assert max(len(line) for line in text.splitlines()) <= LINE_LENGTH, text


def in_function(code: str, indent: str) -> str:
    """``code`` laid out at ``indent`` placed in nested functions so that it parses as written."""
    depth = len(indent) // 4
    head = "".join(f"{'    ' * d}def f{d}():\n" for d in range(depth))
    return head + code


# Widths around the line length: one line, hugged arguments, one argument per line.
@pytest.mark.parametrize("width", [10, 40, 60, 75, 85, 95, 99, 100, 101, 130, 200])
@pytest.mark.parametrize("indent", ["", "    ", " " * 12])
def test_calls_are_laid_out_as_black_lays_them_out(width: int, indent: str) -> None:
    name = "x" * max(1, width // 3)
    args: list[str | DictArg] = [
        f'"{name}"',
        DictArg.of_strings([("megatron.key", f"self.{name}"), ("megatron.other", "len(batch)")]),
    ]
    code = call_statement("otel.start_span", args, indent)
    black_stable(in_function(code, indent))
    assert ast.parse(textwrap.dedent(code))


@pytest.mark.parametrize("width", [20, 60, 90, 100, 150, 300])
def test_a_long_help_text_is_split_at_spaces_into_pieces_black_keeps(width: int) -> None:
    help_text = " ".join(["word"] * (width // 5))
    code = expression_statement(
        f'parser.add_argument("--otel-flag", action="store_true", help="{help_text}")', "    "
    )
    black_stable(in_function(code, "    "))
    call = ast.parse(textwrap.dedent(code)).body[0].value  # type: ignore[attr-defined]
    assert call.keywords[-1].value.value == help_text  # the pieces join to the text


def test_a_dict_value_too_long_for_its_line_goes_in_parentheses() -> None:
    value = " + ".join(f"self.value_{i}" for i in range(5))  # fits only on a line of its own
    code = call_statement("otel.record_metrics", [DictArg.of_strings([("megatron.sum", value)])], "    ")
    assert "(\n" in code and f"            {value}\n" in code
    black_stable(in_function(code, "    "))


@pytest.mark.parametrize("guards", [1, 3, 6])
@pytest.mark.parametrize("name", ["megatron.layer", "megatron." + "very_long_span_name_" * 3])
def test_a_guarded_assignment_falls_back_to_black_parentheses(guards: int, name: str) -> None:
    operands = ["otel.LAYER"] + [f"self.config.some_condition_{i} is not None" for i in range(guards - 1)]
    args: list[str | DictArg] = [f'"{name}"', DictArg.of_strings([("megatron.layer_number", "self.layer")])]
    code = guarded_assignment("_otel_span", operands, "otel.start_span", args, "        ", "    ")
    black_stable(in_function(code, "        "))


def test_a_call_line_that_grew_is_laid_out_again_and_keeps_its_comments() -> None:
    source = (
        "x = 1\n# above\nwrapped(a_long_argument_name, another_long_argument_name, yet_another_one)  # kept\n"
    )
    stmt = cst.parse_module(source).body[1]
    indent = " " * 40
    new = fit_call_line(stmt, indent, "    ")
    text = code_of(new)
    assert text.startswith("# above\nwrapped(\n") and "  # kept" in text
    black_stable(in_function(textwrap.indent(text, indent), indent))
    short = fit_call_line(stmt, "    ", "    ")
    assert short is stmt  # fits: untouched


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_a_reindented_call_explodes_its_hugged_arguments_as_black_does(depth: int) -> None:
    args = ", ".join(f"argument_numb_{i:02d}" for i in range(5))  # 88 columns
    origin = "    "
    hugged = f"result = some_function(\n{origin}{args}\n)\n"
    stmt = cst.parse_statement(hugged)
    indent = origin * (depth + 1)
    moved = code_of(fit(stmt, indent, origin))
    black_stable(in_function(textwrap.indent(moved, indent), indent))
    assert (moved == hugged) == (len(indent + origin + args) <= LINE_LENGTH)


@pytest.mark.parametrize("size", [1, 3, 8, 30])
def test_literals_are_black_formatted_and_evaluate_to_their_value(size: int) -> None:
    value = {
        f"name_{i}": (f"value {i}", i, i * 0.5, None, bool(i % 2), [f"item_{j}" for j in range(size)])
        for i in range(size)
    }
    text = f"VALUE = {literal(value, 0, '', len('VALUE = '))}\n"
    black_stable(text)
    assert ast.literal_eval(text.removeprefix("VALUE = ")) == value


def test_records_frozensets_and_code_are_written_as_calls_black_keeps() -> None:
    value = {
        "small": Record("Span", "group", False),
        "large": Record("Instrument", "histogram", "s", "A description long enough to need a line " * 2),
        "set": Frozen(tuple(f"group_{i}" for i in range(12))),
        "empty": Frozen(()),
        "code": Code("frozenset(GROUPS) - {'x'}"),
    }
    text = f"VALUE: dict[str, object] = {literal(value, 0, '', len('VALUE: dict[str, object] = '))}\n"
    black_stable(text)
    assert 'Span("group", False)' in text and "frozenset()" in text and "frozenset(GROUPS) - {'x'}" in text


def test_statement_and_one_line_round_trip_laid_out_text() -> None:
    text = "        otel.METRICS and otel.record_metrics(\n            lambda: {'a': 1}\n        )"
    node = statement(text, "        ")
    assert one_line(node) == "otel.METRICS and otel.record_metrics( lambda: {'a': 1} )"
    assert code_of(node) == textwrap.dedent(text) + "\n"


def test_no_other_generator_module_lays_code_out_on_its_own() -> None:
    """One LINE_LENGTH, one code_of, one quote: a module that defines its own (or renders a node
    through a Module of its own) is laying out code beside the layout module."""
    offenders = []
    for path in sorted(CODEGEN.rglob("*.py")):
        if path.name == "layout.py" or "otel_runtime" in path.parts or "instrumentation" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in _LAYOUT_NAMES:
                offenders.append(f"{path.relative_to(CODEGEN)}:{node.lineno}: defines {node.name}")
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "LINE_LENGTH" for t in node.targets
            ):
                offenders.append(f"{path.relative_to(CODEGEN)}:{node.lineno}: defines LINE_LENGTH")
            if isinstance(node, ast.Attribute) and node.attr == "code_for_node":
                offenders.append(f"{path.relative_to(CODEGEN)}:{node.lineno}: calls code_for_node")
    assert not offenders, "\n".join(offenders)


def test_one_line_folds_the_space_between_tokens_never_inside_strings() -> None:
    """A help text or an f-string with two spaces keeps them; line breaks inside brackets fold."""
    code = 'parser.add_argument(\n    "--otel-x",  help="two  spaces",\n    default=f"a  {b}")'
    node = cst.parse_expression(code)
    assert one_line(node) == 'parser.add_argument( "--otel-x", help="two  spaces", default=f"a  {b}")'
    laid_out = expression_statement(code, "")
    assert laid_out == 'parser.add_argument("--otel-x", help="two  spaces", default=f"a  {b}")'
    assert one_line(cst.parse_expression("f(a, b)")) == "f(a, b)"


@pytest.mark.parametrize(
    ("code", "folded"),
    [
        ('f(a,  f"x  {{y}}  {z}")', 'f(a, f"x  {{y}}  {z}")'),  # 3.12 tokenizes f-strings: braces kept
        ('f(\n    a,\n    "two  spaces",\n)', 'f( a, "two  spaces", )'),
        ("g(f'{a  +  b!r:>{w}}  x', 'q')", "g(f'{a  +  b!r:>{w}}  x', 'q')"),
        ('h(f"""a\n  {b}  """,  1)', 'h(f"""a\n  {b}  """, 1)'),
        ("x  if  y  else  z", "x if y else z"),
    ],
)
def test_fold_keeps_every_string_as_written(code: str, folded: str) -> None:
    assert fold(code) == folded
    assert ast.dump(ast.parse(folded)) == ast.dump(ast.parse(code))
