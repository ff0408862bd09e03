"""A stream span's call handed its span: ``f(...)`` -> ``ALIAS.stream(_otel_span, f(...))``.

The span's ``finally:`` stays ``_otel_span and _otel_span.end()``: once handed over, that end
only takes the span off the current context, and the iterable ``ALIAS.stream`` returns ends it
(exhausted, closed or abandoned). Laid out as black lays it out: on its line when it fits there,
else the wrapper exploded with the call, its lines one level in, as its last argument::

    response = Response(
        _otel.stream(
            _otel_span,
            openai_stream(
                streams,
                tokenizer,
            ),
        ),
        content_type="text/event-stream",
    )
"""

from __future__ import annotations

import libcst as cst

from codegen.layout import LINE_LENGTH, argument, call_statement, code_of, one_line, statement

_MARK = "_otel_stream_call_"


def stream_statement(
    stmt: cst.BaseStatement, call: cst.Call, wrapper: str, var: str | None, indent: str, step: str
) -> cst.BaseStatement:
    """``stmt`` with ``call`` handed ``var`` through ``wrapper`` (``_otel.stream``), laid out for
    a statement whose first line will start at ``indent``."""
    marked = stmt.visit(_Replace(call, cst.Name(_MARK)))
    assert isinstance(marked, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    leading = marked.leading_lines  # comments above: kept as they are
    marked = marked.with_changes(leading_lines=())
    new = _laid_out(marked, call, wrapper, var, indent, step)
    return new.with_changes(leading_lines=leading)


def _laid_out(
    marked: cst.BaseStatement, call: cst.Call, wrapper: str, var: str | None, indent: str, step: str
) -> cst.SimpleStatementLine | cst.BaseCompoundStatement:
    lines = code_of(marked).rstrip("\n").split("\n")  # the block's indentation left out: relative
    rows = [i for i, line in enumerate(lines) if _MARK in line]
    if len(rows) != 1:
        raise AssertionError(f"the stream call is not in the statement it was resolved in: {code_of(marked)}")
    row = rows[0]
    line = lines[row]
    before, _, after = line.partition(_MARK)
    lead = line[: len(line) - len(line.lstrip())]
    text = code_of(call)
    handed = f"{var}, " if var is not None else ""  # a decorator span's: the traced coroutine's
    inline = f"{before}{wrapper}({handed}{text}){after}"
    if "\n" not in text and len(indent + inline) <= LINE_LENGTH:
        return _parsed(lines, row, [inline])
    if len(lines) == 1 and "\n" not in text:
        split = _split_line(_parsed(lines, row, [inline]), indent, step)
        if split is not None:
            return split
    if after not in ("", ",") or _multiline_string(call):
        return _parsed(lines, row, [inline])  # not black's layout to begin with: kept on its line
    inner = lead + step
    if "\n" not in text and len(indent + inner + f"{handed}{text}") <= LINE_LENGTH:
        exploded = [f"{before}{wrapper}(", f"{inner}{handed}{text}", f"{lead}){after}"]
        return _parsed(lines, row, exploded)
    call_lines = [inner + text.split("\n")[0]] + [
        step + part if part else part for part in text.split("\n")[1:]
    ]
    if var is None:  # a sole argument black explodes takes no magic trailing comma
        return _parsed(lines, row, [f"{before}{wrapper}(", *call_lines, f"{lead}){after}"])
    call_lines[-1] += ","
    exploded = [f"{before}{wrapper}(", f"{inner}{var},", *call_lines, f"{lead}){after}"]
    return _parsed(lines, row, exploded)


def _parsed(
    lines: list[str], row: int, replacement: list[str]
) -> cst.SimpleStatementLine | cst.BaseCompoundStatement:
    text = "\n".join([*lines[:row], *replacement, *lines[row + 1 :]])
    parsed = cst.parse_statement(text + "\n")
    assert isinstance(parsed, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    return parsed


def _split_line(stmt: cst.BaseStatement, indent: str, step: str) -> cst.SimpleStatementLine | None:
    """A one-line ``return f(...)``, ``x = f(...)`` or ``f(...)`` too long for its line, its
    outermost call split as black splits it; None for any other statement."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    head = ""
    if isinstance(small, cst.Return):
        head = "return "
    elif isinstance(small, cst.Assign) and len(small.targets) == 1:
        head = one_line(small.targets[0].target) + " = "
    elif not isinstance(small, cst.Expr):
        return None
    value = small.value
    if not isinstance(value, cst.Call):
        return None
    laid_out = call_statement(head + one_line(value.func), [argument(a) for a in value.args], indent, step)
    if any(len(line) > LINE_LENGTH for line in laid_out.split("\n")):
        return None
    new = statement(laid_out, indent)
    assert isinstance(new, cst.SimpleStatementLine)
    return new.with_changes(trailing_whitespace=stmt.trailing_whitespace)


def _multiline_string(call: cst.Call) -> bool:
    """Whether a string inside ``call`` spans lines (re-indenting its lines would change it)."""
    found = False

    class _Finder(cst.CSTVisitor):
        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            nonlocal found
            found = found or "\n" in node.value

        def visit_FormattedString(self, node: cst.FormattedString) -> None:
            nonlocal found
            found = found or "\n" in code_of(node)

    call.visit(_Finder())
    return found


class _Replace(cst.CSTTransformer):
    def __init__(self, old: cst.Call, new: cst.BaseExpression) -> None:
        super().__init__()
        self.old = old
        self.new = new

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self.new if original_node is self.old else updated_node
