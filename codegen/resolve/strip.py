"""Remove the generator's own constructs from a module, recognised by their structure alone.

Whatever the span names, the attribute expressions or the layout (a span name split over several
string literals, a start statement in black's parenthesized fallback), these are the generator's:

- a span start ``_otel_span[_N] = ALIAS.FLAG [and ...] and ALIAS.start_span(...)``, its setter
  ``_otel_span[_N] and _otel_span[_N].set_attributes(...)`` and its end
  ``_otel_span[_N] and _otel_span[_N].end()``;
- a ``try:`` with neither ``except`` nor ``else`` whose ``finally:`` holds only such ends or hook
  calls (the try form and around hooks): its body takes its place;
- a hook call: an expression statement calling into ``ALIAS`` (``ALIAS.f(...)`` or
  ``ALIAS.FLAG and ALIAS.f(...)``), or one whose code is among ``hook_codes`` (hooks that call
  something else, such as the inserted argument-parser flags);
- a wrap hook: ``ALIAS.f(x)`` -> ``x`` and ``ALIAS.f("key", call)`` -> ``call``;
- a stream span's call: ``ALIAS.f(_otel_span[_N], call)`` -> ``call``, its lines one level out
  again when the wrapper was laid out over several lines (``transforms/stream.py``);
- the decorator ``@ALIAS.traced(...)``;
- the runtime import: ``ALIAS`` in ``from PARENT import ...`` (as releases before the private
  name wrote it: always) and ``import PARENT.ALIAS as _ALIAS`` (with ``imports=True``).

``ALIAS`` is either spelling of the runtime: ``_otel`` (how the generated code imports it) or,
in a module that imports it so (``from PARENT import otel`` at its top level), ``otel`` (how
releases before the private name imported it), so an old instrumented tree strips too. In any
other module ``otel`` is the module's own name (the generated code leaves it alone): its
``otel.f(...)`` calls stay.

The pipeline strips a module that mentions the runtime's name before instrumenting it, so that
applying the specs to an instrumented tree gives what applying them to the pristine tree gives
(a renamed or removed span leaves nothing behind). It keeps the runtime import there, which the
instrumentation then finds in place (an old ``from PARENT import ALIAS`` goes: the code no longer
uses that name). The AST-equivalence checks strip everything and compare the
result with the pristine source.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeGuard

import libcst as cst

from codegen.layout import code_of
from codegen.resolve.scan import compact
from codegen.runtime_calls import SPAN_VARIABLE_PATTERN

Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement  # what a block holds


def strip(
    module: cst.Module, alias: str, parent: str, hook_codes: Collection[str] = (), imports: bool = False
) -> cst.Module:
    """``module`` without the generator's constructs (see the module docstring)."""
    result = module.visit(_Stripper(alias, parent, set(hook_codes), imports))
    assert isinstance(result, cst.Module)
    return result


def _root(node: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node


def _rooted_call(node: cst.BaseExpression, names: Collection[str]) -> TypeGuard[cst.Call]:
    """``ALIAS.x.y(...)``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and _runtime(_root(node.func), names)
    )


def _runtime(node: cst.BaseExpression, names: Collection[str]) -> bool:
    """The runtime's name: one of ``names`` (``_otel``, and ``otel`` in an old instrumented module)."""
    return isinstance(node, cst.Name) and node.value in names


def m_name(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _flag(node: cst.BaseExpression, names: Collection[str]) -> bool:
    """``ALIAS.FLAG``."""
    return isinstance(node, cst.Attribute) and _runtime(node.value, names)


def _operands(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of an ``and`` chain (``a and b and c`` nests to the left or right)."""
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
        return _operands(node.left) + _operands(node.right)
    return [node]


def _statements(body: Sequence[cst.BaseStatement]) -> list[Statement]:
    """A block's statements, typed as what they are (libcst types them as their common base)."""
    out: list[Statement] = []
    for stmt in body:
        assert isinstance(stmt, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        out.append(stmt)
    return out


def _single(stmt: Statement) -> cst.BaseSmallStatement | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


class _Stripper(cst.CSTTransformer):
    def __init__(self, alias: str, parent: str, hook_codes: set[str], imports: bool) -> None:
        super().__init__()
        self.alias = alias
        self.parent = parent
        self.hook_codes = hook_codes
        self.imports = imports
        self.names: tuple[str, ...] = ("_" + alias,)  # with ``alias`` in an old instrumented module

    def visit_Module(self, node: cst.Module) -> bool:
        if any(self._legacy_import(s) for s in _statements(node.body)):
            self.names = ("_" + self.alias, self.alias)
        return True

    def _legacy_import(self, stmt: Statement) -> bool:
        """``from PARENT import ALIAS`` (among other names, perhaps): how releases before the
        private name imported the runtime."""
        small = _single(stmt)
        return (
            isinstance(small, cst.ImportFrom)
            and not small.relative
            and small.module is not None
            and code_of(small.module) == self.parent
            and not isinstance(small.names, cst.ImportStar)
            and any(m_name(a.name, self.alias) and a.asname is None for a in small.names)
        )

    def _foreign(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` reads the name ``ALIAS`` in a module where it is not the runtime."""
        if self.alias in self.names:
            return False
        found = False

        class _Find(cst.CSTVisitor):
            def visit_Name(self, name: cst.Name) -> None:
                nonlocal found
                found = found or name.value == alias

        alias = self.alias
        node.visit(_Find())
        return found

    # -- statements ---------------------------------------------------------------------------

    def _span_start(self, small: cst.BaseSmallStatement | None) -> bool:
        if not isinstance(small, cst.Assign) or len(small.targets) != 1:
            return False
        target = small.targets[0].target
        if not (isinstance(target, cst.Name) and SPAN_VARIABLE_PATTERN.match(target.value)):
            return False
        operands = _operands(small.value)
        if len(operands) >= 3 and _runtime(operands[0], self.names):  # ``ALIAS and``: at exit
            operands = operands[1:]
        last = operands[-1]
        return (
            len(operands) >= 2
            and _flag(operands[0], self.names)
            and isinstance(last, cst.Call)
            and isinstance(last.func, cst.Attribute)
            and _runtime(last.func.value, self.names)
            and last.func.attr.value == "start_span"
        )

    def _span_call(self, small: cst.BaseSmallStatement | None, methods: tuple[str, ...]) -> bool:
        """``V and V.end()`` / ``V and V.set_attributes(...)``."""
        if not isinstance(small, cst.Expr):
            return False
        operands = _operands(small.value)
        if len(operands) != 2 or not isinstance(operands[0], cst.Name):
            return False
        var, call = operands[0].value, operands[1]
        return (
            SPAN_VARIABLE_PATTERN.match(var) is not None
            and isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and m_name(call.func.value, var)
            and call.func.attr.value in methods
        )

    def _result_wrap(self, small: cst.BaseSmallStatement | None) -> cst.BaseExpression | None:
        """The wrapped call of a statement ``ALIAS.f("key", call)`` (a wrap hook's result form)."""
        if not isinstance(small, cst.Expr) or not _rooted_call(small.value, self.names):
            return None
        unwrapped = self._unwrap(small.value)
        return unwrapped if isinstance(unwrapped, cst.Call) and unwrapped is not small.value else None

    def _hook(self, stmt: Statement) -> bool:
        small = _single(stmt)
        if not isinstance(small, cst.Expr):
            return False
        if self.hook_codes and compact(code_of(small)) in self.hook_codes and not self._foreign(small):
            return True
        operands = _operands(small.value)
        if len(operands) >= 2 and _runtime(operands[0], self.names):  # ``ALIAS and``: at exit
            operands = operands[1:]
        if len(operands) == 2 and not _flag(operands[0], self.names):
            return False
        if len(operands) > 2 or not _rooted_call(operands[-1], self.names):
            return False
        return self._result_wrap(small) is None

    def _removed(self, stmt: Statement) -> bool:
        small = _single(stmt)
        return (
            self._span_start(small) or self._span_call(small, ("end", "set_attributes")) or self._hook(stmt)
        )

    def _try_form(self, stmt: cst.Try) -> bool:
        if stmt.handlers or stmt.orelse or stmt.finalbody is None:
            return False
        final = stmt.finalbody.body
        return (
            isinstance(final, cst.IndentedBlock)
            and bool(final.body)
            and all(self._removed(s) for s in _statements(final.body))
            and isinstance(stmt.body, cst.IndentedBlock)
        )

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Our statements are judged whole: their calls must not be unwrapped first.
        if isinstance(node, cst.SimpleStatementLine) and self._removed(node):
            return False
        if isinstance(node, cst.Decorator) and self._decorator(node):
            return False
        return super().on_visit(node)

    def _statements(self, body: list[Statement]) -> list[Statement]:
        out: list[Statement] = []
        pending: list[cst.EmptyLine] = []
        for stmt in body:
            if self._removed(stmt):
                pending.extend(stmt.leading_lines)
                continue
            if isinstance(stmt, cst.Try) and self._try_form(stmt):
                assert isinstance(stmt.body, cst.IndentedBlock)
                inner = self._statements(_statements(stmt.body.body))
                if not inner:
                    continue
                pending.extend(stmt.leading_lines)
                first, rest = inner[0], inner[1:]
                out.append(first.with_changes(leading_lines=[*pending, *first.leading_lines]))
                out.extend(rest)
                pending = []
                continue
            if pending:
                stmt = stmt.with_changes(leading_lines=[*pending, *stmt.leading_lines])
                pending = []
            out.append(stmt)
        return out

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body = self._statements(_statements(updated_node.body))
        if not body:  # not ours after all: a block of nothing but such statements is left alone
            return updated_node
        return updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = [s for s in (self._without_import(s) for s in _statements(updated_node.body)) if s is not None]
        return updated_node.with_changes(body=body)

    def _without_import(self, stmt: Statement) -> Statement | None:
        small = _single(stmt)
        if self.imports and isinstance(small, cst.Import) and len(small.names) == 1:
            name = small.names[0]
            if (
                code_of(name.name) == f"{self.parent}.{self.alias}"
                and isinstance(name.asname, cst.AsName)
                and m_name(name.asname.name, "_" + self.alias)
            ):
                return None
        if (
            not isinstance(small, cst.ImportFrom)
            or small.relative
            or small.module is None
            or isinstance(small.names, cst.ImportStar)
            or code_of(small.module) != self.parent
        ):
            return stmt
        names = list(small.names)
        kept = [a for a in names if not (m_name(a.name, self.alias) and a.asname is None)]
        if len(kept) == len(names):
            return stmt
        if not kept:
            return None
        if names[-1] not in kept:  # the last name goes: the new last one takes its separator
            kept[-1] = kept[-1].with_changes(comma=names[-1].comma)
        return stmt.with_changes(body=[small.with_changes(names=kept)])

    # -- expressions --------------------------------------------------------------------------

    def _decorator(self, node: cst.Decorator) -> bool:
        target = node.decorator
        return (
            isinstance(target, cst.Call)
            and isinstance(target.func, cst.Attribute)
            and _runtime(target.func.value, self.names)
            and target.func.attr.value == "traced"
        )

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        decorators = [d for d in updated_node.decorators if not self._decorator(d)]
        if len(decorators) == len(updated_node.decorators):
            return updated_node
        if not updated_node.decorators[0] in decorators and decorators:
            first = updated_node.decorators[0]
            decorators[0] = decorators[0].with_changes(leading_lines=first.leading_lines)
        elif not decorators:
            lines = updated_node.decorators[0].leading_lines
            return updated_node.with_changes(
                decorators=[], leading_lines=[*updated_node.leading_lines, *lines]
            )
        return updated_node.with_changes(decorators=decorators)

    def _unwrap(self, node: cst.Call) -> cst.BaseExpression:
        """``ALIAS.f(x)`` -> ``x``; ``ALIAS.f("key", x)`` -> ``x``; anything else unchanged."""
        if not _rooted_call(node, self.names):
            return node
        args = node.args
        if any(a.keyword is not None or a.star for a in args):
            return node
        if len(args) == 1:
            return _handed_back(node) if _rooted_call(node, self.names) else args[0].value
        if len(args) == 2 and isinstance(args[0].value, cst.SimpleString):
            return args[1].value
        if (
            len(args) == 2
            and isinstance(args[0].value, cst.Name)
            and SPAN_VARIABLE_PATTERN.match(args[0].value.value)
        ):
            return _handed_back(node)
        return node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self._unwrap(updated_node)


def _handed_back(wrapper: cst.Call) -> cst.BaseExpression:
    """The call a stream span's ``ALIAS.stream(var, call)`` (or a decorator span's
    ``ALIAS.stream(call)``, or a wrap hook's ``ALIAS.f(x)``) wraps, with the lines the exploded
    wrapper moved one level in moved back out."""
    last = wrapper.args[-1]
    call = last.value
    opening = wrapper.whitespace_before_args
    after = last.comma.whitespace_after if isinstance(last.comma, cst.Comma) else last.whitespace_after_arg
    if not isinstance(opening, cst.ParenthesizedWhitespace) or not isinstance(
        after, cst.ParenthesizedWhitespace
    ):
        return call
    inner, outer = opening.last_line.value, after.last_line.value
    if not inner.startswith(outer) or inner == outer:
        return call
    step = inner[len(outer) :]
    lines = code_of(call).split("\n")
    if len(lines) == 1:
        return call
    moved = [lines[0]] + [line.removeprefix(step) for line in lines[1:]]
    return cst.parse_expression("\n".join(moved)).with_changes(lpar=call.lpar, rpar=call.rpar)
