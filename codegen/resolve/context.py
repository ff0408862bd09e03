"""Everything resolution and the transforms ask of one source file, computed once.

A :class:`FileContext` holds the parsed module and, on first use, what the checks derive from
it: line numbers (libcst's position pass: only error messages and ``# fmt: off`` regions need
them), the runtime-name binding analysis (libcst's scope pass: only for a module that spells the
name) and the standard library's view of the same text (``ast`` and ``symtable``, about a
twentieth of libcst's scope pass) that the expression checks read, with each statement of the
libcst tree paired with its ``ast`` counterpart.
"""

from __future__ import annotations

import ast
import symtable
from collections.abc import Mapping, Sequence

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider


class FileContext:
    def __init__(self, path: str, source: str, module: cst.Module, stripped: bool = False) -> None:
        self.path = path
        self.source = source  # the file's text as read
        self.module = module  # pristine: an instrumented source was stripped (``stripped``)
        self.stripped = stripped
        self._positions: Mapping[cst.CSTNode, CodeRange] | None = None
        self._ast: ast.Module | None = None
        self._symbols: symtable.SymbolTable | None = None
        self._pairs: dict[int, list[ast.stmt]] | None = None
        self._cst_of: dict[int, cst.CSTNode] = {}

    # -- line numbers ----------------------------------------------------------------------------

    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        if self._positions is None:
            self._positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
        return self._positions

    def start(self, node: cst.CSTNode) -> int:
        return self.positions()[node].start.line

    def column(self, node: cst.CSTNode) -> int:
        return self.positions()[node].start.column

    def end(self, node: cst.CSTNode) -> int:
        return self.positions()[node].end.line

    def line(self, node: cst.CSTNode, end: bool) -> int:
        return self.end(node) if end else self.start(node)

    # -- the standard library's view ----------------------------------------------------------------

    def text(self) -> str:
        """The text ``module`` renders to, without a byte order mark."""
        text = self.module.code if self.stripped else self.source
        return text.removeprefix("\ufeff")

    def tree(self) -> ast.Module:
        """``ast`` of the module; SyntaxError when this Python cannot parse it."""
        if self._ast is None:
            self._ast = ast.parse(self.text(), self.path)
        return self._ast

    def symbols(self) -> symtable.SymbolTable:
        if self._symbols is None:
            self._symbols = symtable.symtable(self.text(), self.path, "exec")
        return self._symbols

    def ast_of(self, stmt: cst.CSTNode) -> list[ast.stmt]:
        """The ``ast`` statements of a libcst statement (several for ``a; b``)."""
        if self._pairs is None:
            self._pairs = {}
            _pair_block(self.module.body, self.tree().body, self._pairs, self._cst_of)
        return self._pairs.get(id(stmt), [])

    def cst_of(self, node: ast.stmt) -> cst.CSTNode | None:
        """The libcst statement of an ``ast`` compound statement (after :meth:`ast_of`)."""
        return self._cst_of.get(id(node))


def _pair_block(
    body: Sequence[cst.BaseStatement | cst.BaseSmallStatement],
    nodes: Sequence[ast.stmt],
    pairs: dict[int, list[ast.stmt]],
    cst_of: dict[int, cst.CSTNode],
) -> None:
    index = 0
    for stmt in body:
        if isinstance(stmt, (cst.SimpleStatementLine, cst.BaseSmallStatement)):
            # a line of statements, or one statement of a one-line suite
            count = len(stmt.body) if isinstance(stmt, cst.SimpleStatementLine) else 1
            pairs[id(stmt)] = list(nodes[index : index + count])
            index += count
            continue
        if index >= len(nodes):
            return
        node = nodes[index]
        index += 1
        pairs[id(stmt)] = [node]
        cst_of[id(node)] = stmt
        _pair_compound(stmt, node, pairs, cst_of)


def _suite(
    suite: cst.BaseSuite,
    nodes: Sequence[ast.stmt],
    pairs: dict[int, list[ast.stmt]],
    cst_of: dict[int, cst.CSTNode],
) -> None:
    if isinstance(suite, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        _pair_block(suite.body, nodes, pairs, cst_of)


def _pair_compound(
    stmt: cst.BaseStatement, node: ast.stmt, pairs: dict[int, list[ast.stmt]], cst_of: dict[int, cst.CSTNode]
) -> None:
    if not isinstance(stmt, cst.BaseCompoundStatement):
        return
    if isinstance(stmt, cst.Match) and isinstance(node, ast.Match):
        for case, ast_case in zip(stmt.cases, node.cases, strict=False):
            _suite(case.body, ast_case.body, pairs, cst_of)
        return
    body = getattr(stmt, "body", None)
    if isinstance(body, cst.BaseSuite):
        _suite(body, getattr(node, "body", []), pairs, cst_of)
    if isinstance(stmt, (cst.Try, cst.TryStar)):
        ast_handlers = getattr(node, "handlers", [])
        for index, handler in enumerate(stmt.handlers[: len(ast_handlers)]):
            suite = getattr(handler, "body", None)
            if isinstance(suite, cst.BaseSuite):
                _suite(suite, ast_handlers[index].body, pairs, cst_of)
    orelse = getattr(stmt, "orelse", None)
    if isinstance(orelse, cst.If):  # elif: the ast's orelse is [If]
        ast_orelse = getattr(node, "orelse", [])
        if ast_orelse:
            pairs[id(orelse)] = [ast_orelse[0]]
            cst_of[id(ast_orelse[0])] = orelse
            _pair_compound(orelse, ast_orelse[0], pairs, cst_of)
    elif isinstance(orelse, cst.Else):
        _suite(orelse.body, getattr(node, "orelse", []), pairs, cst_of)
    final = getattr(stmt, "finalbody", None)
    if isinstance(final, cst.Finally):
        _suite(final.body, getattr(node, "finalbody", []), pairs, cst_of)
