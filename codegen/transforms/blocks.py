"""Apply the planned wraps and inserts of one file, block by block, in a single libcst pass.

Edits are keyed by the original ``IndentedBlock`` they apply to. Wraps in one block are nested or
disjoint (checked when planning); identical ranges nest in declaration order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import libcst as cst

from codegen.layout import code_of, expression_statement, fit, fit_call_line, statement
from codegen.resolve.sites import FilePlan, Insert, Rewrite, StreamSite, Wrap
from codegen.resolve.statements import block_ancestry, child_blocks
from codegen.runtime_calls import guard, names_runtime, payload_call, span_variable
from codegen.spec.model import AroundHook, EntryHook, Payload, Project, Span, StatementHook, WrapResult
from codegen.transforms.rewrite import CallRewriter
from codegen.transforms.span import span_decorator, span_end, span_setter, span_start
from codegen.transforms.stream import stream_statement


def nesting_depths(wraps: Sequence[Wrap]) -> dict[int, int]:
    """Depth of each span wrap among the span wraps of its function (1 = outermost)."""
    spans = [w for w in wraps if isinstance(w.entry, Span)]
    order = {id(w): i for i, w in enumerate(spans)}
    return {id(w): 1 + sum(o.contains(w, order[id(o)] < order[id(w)]) for o in spans) for w in spans}


class BlockEditor(cst.CSTTransformer):
    def __init__(self, project: Project, plan: FilePlan, frozen: frozenset[int] = frozenset()) -> None:
        super().__init__()
        wraps, inserts, rewrites, streams = plan.wraps, plan.inserts, plan.rewrites, plan.streams
        step = plan.module.default_indent
        self.at_exit = plan.at_exit  # ids of the functions that may run at the final clearing
        self.frozen = frozen  # ids of statements black leaves alone (`# fmt: off` / `# fmt: skip`)
        self.rewrites: dict[int, list[Rewrite]] = defaultdict(list)
        for rewrite in rewrites:
            self.rewrites[id(rewrite.statement)].append(rewrite)
        self.decorations = {id(func): span for span, func in plan.decorations}
        self.project = project
        self.step = step
        self.steps: list[str] = [step]  # the module's step, then the enclosing edited functions'
        self.order = {id(w): i for i, w in enumerate(wraps)}
        self.depths = nesting_depths(wraps)
        self.wraps: dict[int, list[Wrap]] = defaultdict(list)
        self.inserts: dict[int, list[Insert]] = defaultdict(list)
        for wrap in wraps:
            self.wraps[id(wrap.block)].append(wrap)
        for insert in inserts:
            self.inserts[id(insert.block)].append(insert)
        self.indents: list[str] = [""]
        # Only the edited functions and the statements that lead to them are visited.
        self.edited = {id(w.function) for w in wraps} | {id(i.function) for i in inserts}
        self.edited |= {id(r.function) for r in rewrites}
        self.edited |= set(self.decorations)
        # a stream span's call: id(statement) -> (the span's wrap, None for a decorator span's;
        # its function; the call)
        self.streams: dict[int, list[tuple[Wrap | None, cst.FunctionDef, StreamSite]]] = defaultdict(list)
        for wrap in wraps:
            if wrap.stream is not None:
                self.streams[id(wrap.stream.statement)].append((wrap, wrap.function, wrap.stream))
        for _, function, site in streams:
            self.streams[id(site.statement)].append((None, function, site))
            self.edited.add(id(function))
        self.wrap_list = list(wraps)
        self.inside = 0
        # Inside an edited function, only blocks with edits and the blocks around them.
        self.relevant = {id(w.block) for w in wraps} | {id(i.block) for i in inserts}
        self.relevant |= {id(r.block) for r in rewrites}
        self.relevant |= {id(w.stream.block) for w in wraps if w.stream is not None}
        self.relevant |= {id(site.block) for _, _, site in streams}
        edits = [(w.function, w.block) for w in wraps] + [(i.function, i.block) for i in inserts]
        edits += [(w.function, w.stream.block) for w in wraps if w.stream is not None]
        edits += [(function, site.block) for _, function, site in streams]
        for function, block in edits + [(r.function, r.block) for r in rewrites]:
            self.relevant.update(b for b, _ in block_ancestry(function)[id(block)])
        self.leading: set[int] = set()  # ids of the compound statements an edited function is in

    def visit_Module(self, node: cst.Module) -> bool:
        self.leading = _leading(node.body, self.edited)
        return True

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = _kind(type(node))
        if kind is _FUNCTION:
            assert isinstance(node, cst.FunctionDef)
            if id(node) in self.edited:
                self.inside += 1
                # New levels follow the function's own indentation (a tab-indented function in a
                # space-indented module stays tab-indented).
                own = node.body.indent if isinstance(node.body, cst.IndentedBlock) else None
                self.steps.append(self.step)
                self.step = own if own is not None else self.steps[0]
                return super().on_visit(node)
            return id(node) in self.leading and super().on_visit(node)
        if self.inside:
            if kind is _LINE or kind is _SIMPLE:
                return False
            if (
                kind is _COMPOUND
                and id(node) not in self.leading
                and not any(id(b) in self.relevant for b in child_blocks(node))  # type: ignore[arg-type]  # kind: compound
            ):
                return False
            return super().on_visit(node)
        if kind is _LINE or (kind is _COMPOUND and id(node) not in self.leading):
            return False
        return super().on_visit(node)

    # libcst declares on_leave generic in the node type (CSTNodeT), which no override can restate
    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
        if isinstance(original_node, cst.FunctionDef) and id(original_node) in self.edited:
            self.inside -= 1
            self.step = self.steps.pop()
        return super().on_leave(original_node, updated_node)

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        span = self.decorations.get(id(original_node))
        if span is None:
            return updated_node
        decorator = span_decorator(self.project, span, self.indents[-1], self.step)
        return updated_node.with_changes(decorators=[*updated_node.decorators, decorator])

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        self.indents.append(self.indents[-1] + (node.indent if node.indent is not None else self.step))
        return True

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        indent = self.indents.pop()
        wraps = self.wraps.get(id(original_node), [])
        inserts = self.inserts.get(id(original_node), [])
        stmts = list(updated_node.body)
        for index, original in enumerate(original_node.body):
            for wrap, function, site in self.streams.get(id(original), ()):
                stmts[index] = self._stream(stmts[index], wrap, function, site, indent, original_node, index)
            for rewrite in self.rewrites.get(id(original), ()):
                frozen = id(original) in self.frozen
                stmts[index] = self._rewrite(stmts[index], rewrite, indent, frozen)
        if not wraps and not inserts:
            return updated_node.with_changes(body=stmts)
        ordered = sorted(wraps, key=lambda w: (w.start, -w.end, self.order[id(w)]))
        self.origin = indent
        # statements black may lay out again once re-indented; not those under `# fmt: off`
        self.originals = {
            id(stmt) for stmt, original in zip(stmts, original_node.body) if id(original) not in self.frozen
        }
        body = self._build(stmts, 0, len(stmts), ordered, inserts, indent)
        return updated_node.with_changes(body=body)

    def _build(
        self,
        stmts: list[cst.BaseStatement],
        lo: int,
        hi: int,
        wraps: list[Wrap],
        inserts: list[Insert],
        indent: str,
    ) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        position = lo
        pending = list(wraps)
        while pending:
            wrap = pending.pop(0)
            inner = [w for w in pending if wrap.start <= w.start and w.end <= wrap.end]
            pending = [w for w in pending if w not in inner]
            out.extend(self._plain(stmts, position, wrap.start, inserts, indent))
            inner_inserts = [i for i in inserts if wrap.start < i.index < wrap.end]
            covered = self._build(stmts, wrap.start, wrap.end, inner, inner_inserts, indent + self.step)
            out.extend(self._wrap(wrap, covered, indent))
            position = wrap.end
        out.extend(self._plain(stmts, position, hi, inserts, indent))
        return out

    def _plain(
        self, stmts: list[cst.BaseStatement], lo: int, hi: int, inserts: list[Insert], indent: str
    ) -> list[cst.BaseStatement]:
        """``stmts[lo:hi]`` with the inserts whose index lies in ``[lo, hi]`` placed before their
        statement (above its comments: they introduce the statement, not the hook)."""
        out: list[cst.BaseStatement] = []
        for index in range(lo, hi + 1):
            for insert in inserts:
                if insert.index == index:
                    at_exit = id(insert.function) in self.at_exit
                    out.append(self._hook_call(insert.hook, insert.hook.payload, indent, at_exit))
            if index < hi:
                out.append(stmts[index])
        return out

    def _rewrite(
        self, stmt: cst.BaseStatement, rewrite: Rewrite, indent: str, frozen: bool = False
    ) -> cst.BaseStatement:
        new = stmt.visit(CallRewriter(rewrite, self.project.runtime))
        assert isinstance(new, cst.BaseStatement)
        # A one-line statement that became one long call is laid out again the way black would.
        one_line = "\n" not in code_of(stmt.with_changes(leading_lines=())).rstrip("\n")
        if isinstance(rewrite.hook.target, WrapResult) and one_line and not frozen:
            new = fit_call_line(new, indent, self.step)
        return new

    def _stream(
        self,
        stmt: cst.BaseStatement,
        wrap: Wrap | None,
        function: cst.FunctionDef,
        site: StreamSite,
        indent: str,
        block: cst.IndentedBlock,
        index: int,
    ) -> cst.BaseStatement:
        """The stream call of ``wrap``'s span handed the span (``ALIAS.stream(var, call)``; a
        decorator span's, ``wrap`` None: ``ALIAS.stream(call)``), laid out at the indentation the
        statement will have once every wrap around it is made."""
        ancestry = block_ancestry(function).get(id(block), ())
        around = sum(
            (w.block is block and w.start <= index < w.end)
            or any(b == id(w.block) and w.start <= i < w.end for b, i in ancestry)
            for w in self.wrap_list
            if w.function is function and _indents(w)
        )
        var = span_variable(self.depths[id(wrap)]) if wrap is not None else None
        wrapper = f"{self.project.runtime.binding}.stream"
        return stream_statement(stmt, site.call, wrapper, var, indent + self.step * around, self.step)

    def _hook_call(
        self,
        hook: EntryHook | StatementHook | AroundHook,
        payload: Payload,
        indent: str,
        at_exit: bool = False,
    ) -> cst.BaseStatement:
        """The statement a hook inserts, laid out at ``indent``: its call, made here from the
        payload (runtime_calls), behind its guard (``at_exit``: behind the runtime's name first)."""
        runtime = self.project.runtime
        call = payload_call(payload, runtime.alias, runtime.binding)
        flag = guard(runtime.binding, hook.guard)
        if at_exit and (flag or names_runtime(call, runtime.binding)):
            flag = " and ".join(f for f in (runtime.binding, flag) if f)
        return statement(expression_statement(call, indent, self.step, flag), indent)

    def _wrap(self, wrap: Wrap, covered: list[cst.BaseStatement], indent: str) -> list[cst.BaseStatement]:
        inner = indent + self.step
        body = list(covered)
        before: list[cst.BaseStatement] = []
        final: list[cst.BaseStatement] = []
        entry = wrap.entry
        at_exit = id(wrap.function) in self.at_exit
        if isinstance(entry, Span) and entry.form == "flat":
            var = span_variable(self.depths[id(wrap)])
            start = statement(span_start(self.project, entry, var, indent, self.step, at_exit), indent)
            start = start.with_changes(leading_lines=_leading_lines(body[0]))
            body[0] = body[0].with_changes(leading_lines=())
            setter = span_setter(self.project, entry, var, indent, self.step)
            after = [statement(setter, indent)] if setter is not None else []
            return [start, *body, *after, statement(span_end(var, indent), indent)]
        # The covered statements move one level in; a call whose arguments black had hugged on one
        # line gets one argument per line when that line no longer fits (black's own next step).
        body = [fit(stmt, inner, self.origin) if id(stmt) in self.originals else stmt for stmt in body]
        if isinstance(entry, Span):
            var = span_variable(self.depths[id(wrap)])
            before.append(statement(span_start(self.project, entry, var, indent, self.step, at_exit), indent))
            setter = span_setter(self.project, entry, var, inner, self.step)
            if setter is not None:
                _append_before_return(body, statement(setter, inner))
            final.append(statement(span_end(var, inner), inner))
        else:
            if entry.enter:
                before.append(self._hook_call(entry, entry.enter, indent, at_exit))
            if entry.exit:
                final.append(self._hook_call(entry, entry.exit, inner, at_exit))
        if before:
            # Comments and blank lines that introduced the covered statements now introduce the wrap.
            before[0] = before[0].with_changes(leading_lines=_leading_lines(body[0]))
            body[0] = body[0].with_changes(leading_lines=())
        if not final:
            return before + body
        own = self.step if self.step != self.steps[0] else None  # None: the module's default
        wrapped = cst.Try(
            body=cst.IndentedBlock(body=body, indent=own),
            finalbody=cst.Finally(body=cst.IndentedBlock(body=final, indent=own)),
        )
        if not before:
            wrapped = wrapped.with_changes(leading_lines=_leading_lines(body[0]))
            wrapped = wrapped.with_changes(
                body=wrapped.body.with_changes(body=[body[0].with_changes(leading_lines=())] + body[1:])
            )
        return before + [wrapped]


def _indents(wrap: Wrap) -> bool:
    """Whether ``wrap`` moves its statements one level in (into a ``try:``)."""
    if isinstance(wrap.entry, Span):
        return wrap.entry.form != "flat"
    return wrap.entry.exit is not None


def _leading(body: Sequence[cst.BaseStatement], functions: set[int]) -> set[int]:
    """Ids of every compound statement (classes and defs too) that holds one of ``functions``
    at any depth of classes and blocks, the functions themselves included."""
    leading: set[int] = set()
    stack: list[tuple[cst.BaseStatement, tuple[int, ...]]] = [(stmt, ()) for stmt in body]
    while stack:
        current, path = stack.pop()
        if isinstance(current, cst.SimpleStatementLine):
            continue
        here = (*path, id(current))
        if id(current) in functions:
            leading.update(here)
        if isinstance(current, cst.If) and isinstance(current.orelse, cst.If):
            # an ``elif`` is an If node of its own between the chain's head and its body: the
            # visit passes through it, so it leads to what its branches define
            stack.extend((stmt, here) for stmt in getattr(current.body, "body", ()))
            stack.append((current.orelse, here))
            continue
        if isinstance(current, cst.BaseCompoundStatement):
            for block in child_blocks(current):
                stack.extend((stmt, here) for stmt in getattr(block, "body", ()))
    return leading


_FUNCTION, _LINE, _SIMPLE, _COMPOUND, _OTHER = range(5)
_KINDS: dict[type, int] = {}


def _kind(node_type: type) -> int:
    """What ``on_visit`` asks of a node, by its type (libcst's base classes are ABCs, whose
    ``isinstance`` is slow)."""
    kind = _KINDS.get(node_type)
    if kind is None:
        if issubclass(node_type, cst.FunctionDef):
            kind = _FUNCTION
        elif issubclass(node_type, cst.SimpleStatementLine):
            kind = _LINE
        elif issubclass(node_type, (cst.SimpleStatementSuite, cst.BaseExpression)):
            kind = _SIMPLE
        elif issubclass(node_type, cst.BaseCompoundStatement):
            kind = _COMPOUND
        else:
            kind = _OTHER
        _KINDS[node_type] = kind
    return kind


def _append_before_return(body: list[cst.BaseStatement], stmt: cst.BaseStatement) -> None:
    """End attributes go after the covered statements, or just before a final ``return``."""
    last = body[-1]
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return):
        body.insert(len(body) - 1, stmt)
    else:
        body.append(stmt)


def _leading_lines(stmt: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    """The comments and blank lines above a statement (libcst declares them on both of
    BaseStatement's subclasses, not on BaseStatement)."""
    assert isinstance(stmt, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    return stmt.leading_lines
