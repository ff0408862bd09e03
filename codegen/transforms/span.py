"""Wrap a run of statements in a span, in place.

The covered statements stay where they are (a docstring stays first, ``super()`` and ``nonlocal``
keep working) inside ``try``/``finally``; the guard is a module-attribute read, so a disabled group
costs one attribute load and never evaluates an attribute expression::

    _otel_span = otel.LAYER and otel.start_span("megatron.layer.mlp")
    try:
        output = self._forward_mlp(hidden_states)
    finally:
        _otel_span and _otel_span.end()
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import libcst as cst

from codegen.resolve.plan import Wrap
from codegen.spec.model import Attribute, Project
from codegen.transforms.render import DictArg, call_statement, string_literal

SPAN_VARIABLE = "_otel_span"


def span_variable(depth: int) -> str:
    return SPAN_VARIABLE if depth == 1 else f"{SPAN_VARIABLE}_{depth}"


def nesting_depths(wraps: Sequence[Wrap]) -> dict[int, int]:
    """Depth of each wrap among the wraps of its function (1 = outermost), keyed by ``id(wrap)``."""
    order = {id(w): i for i, w in enumerate(wraps)}

    def contains(outer: Wrap, inner: Wrap) -> bool:
        if outer is inner or outer.function is not inner.function:
            return False
        if (outer.first_line, outer.last_line) == (inner.first_line, inner.last_line):
            return order[id(outer)] < order[id(inner)]
        return outer.first_line <= inner.first_line and inner.last_line <= outer.last_line

    return {id(w): 1 + sum(contains(o, w) for o in wraps) for w in wraps}


class SpanTransformer(cst.CSTTransformer):
    def __init__(self, project: Project, wraps: Sequence[Wrap], default_indent: str) -> None:
        super().__init__()
        self.alias = project.runtime.alias
        self.flags = {g.name: g.flag for g in project.groups}
        self.default_indent = default_indent
        self.order = {id(w): i for i, w in enumerate(wraps)}
        self.depths = nesting_depths(wraps)
        self.by_block: dict[int, list[Wrap]] = defaultdict(list)
        for wrap in wraps:
            self.by_block[id(wrap.block)].append(wrap)
        self.indents: list[str] = [""]

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        self.indents.append(self.indents[-1] + (node.indent if node.indent is not None else self.default_indent))
        return True

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        indent = self.indents.pop()
        wraps = self.by_block.get(id(original_node))
        if not wraps:
            return updated_node
        ordered = sorted(wraps, key=lambda w: (w.start, -w.end, self.order[id(w)]))
        body = self._build(list(updated_node.body), 0, len(updated_node.body), ordered, indent)
        return updated_node.with_changes(body=body)

    def _build(
        self, stmts: list[cst.BaseStatement], lo: int, hi: int, wraps: list[Wrap], indent: str
    ) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        position = lo
        pending = list(wraps)
        while pending:
            wrap = pending.pop(0)
            inner = [w for w in pending if wrap.start <= w.start and w.end <= wrap.end]
            pending = [w for w in pending if w not in inner]
            out.extend(stmts[position : wrap.start])
            covered = self._build(stmts, wrap.start, wrap.end, inner, indent + self.default_indent)
            out.extend(self._wrap(wrap, covered, indent))
            position = wrap.end
        out.extend(stmts[position:hi])
        return out

    def _wrap(self, wrap: Wrap, covered: list[cst.BaseStatement], indent: str) -> list[cst.BaseStatement]:
        span = wrap.span
        var = span_variable(self.depths[id(wrap)])
        args: list[str | DictArg] = [string_literal(span.name)]
        if span.attributes:
            args.append(_dict_arg(span.attributes))
        guard = f"{var} = {self.alias}.{self.flags[span.group]} and {self.alias}.start_span"
        start = self._statement(call_statement(guard, args, indent, self.default_indent), indent)
        body = list(covered)
        # Comments and blank lines that introduced the covered statements now introduce the span.
        start = start.with_changes(leading_lines=body[0].leading_lines)
        body[0] = body[0].with_changes(leading_lines=())
        if span.end_attributes:
            inner_indent = indent + self.default_indent
            setter = call_statement(
                f"{var} and {var}.set_attributes", [_dict_arg(span.end_attributes)], inner_indent, self.default_indent
            )
            body.append(self._statement(setter, inner_indent))
        end = self._statement(f"{indent}{self.default_indent}{var} and {var}.end()", indent + self.default_indent)
        wrapped = cst.Try(
            body=cst.IndentedBlock(body=body),
            finalbody=cst.Finally(body=cst.IndentedBlock(body=[end])),
        )
        return [start, wrapped]

    @staticmethod
    def _statement(text: str, indent: str) -> cst.BaseStatement:
        lines = text.split("\n")
        dedented = "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in lines)
        return cst.parse_statement(dedented + "\n")


def _dict_arg(attributes: Sequence[Attribute]) -> DictArg:
    return DictArg(tuple((a.key, a.expr) for a in attributes))
