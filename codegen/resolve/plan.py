"""Bind every span of the project to a contiguous run of statements in the parsed source.

The result is a :class:`Plan`: per file, the parsed module and the wraps to apply. Every problem
(missing file, unknown function, selector with zero or several matches, unsafe target, overlap)
is reported with the span's spec location and, where useful, the candidates.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from codegen.diagnostics import Diagnostics, SpecError
from codegen.resolve.functions import collect_functions, suggest, unsafe_reason
from codegen.resolve.statements import (
    StatementSite,
    block_ancestry,
    first_line_code,
    matches,
    statement_sites,
)
from codegen.spec.model import Hook, Project, Region, Selector, Span
from codegen.transforms.span import SPAN_VARIABLE


@dataclass(frozen=True)
class Wrap:
    """A span, or an around hook, bound to ``block.body[start:end]`` of the original tree."""

    entry: Span | Hook
    function: cst.FunctionDef
    block: cst.IndentedBlock
    start: int
    end: int
    # (id(block), index) of every statement enclosing ``block``, outermost first
    ancestry: tuple[tuple[int, int], ...] = ()

    def contains(self, other: Wrap, earlier: bool) -> bool:
        """Whether ``other`` lies inside this wrap (``earlier``: this one is declared first, which
        decides between two wraps of the same statements)."""
        if other is self or other.function is not self.function:
            return False
        if other.block is self.block:
            if (self.start, self.end) == (other.start, other.end):
                return earlier
            return self.start <= other.start and other.end <= self.end
        return any(b == id(self.block) and self.start <= i < self.end for b, i in other.ancestry)


@dataclass(frozen=True)
class Insert:
    """A hook call inserted before ``block.body[index]`` (or at the end when index == len)."""

    hook: Hook
    function: cst.FunctionDef
    block: cst.IndentedBlock
    index: int


@dataclass(frozen=True)
class Rewrite:
    """A wrap hook bound to one call inside ``statement`` (a statement of ``block``)."""

    hook: Hook
    function: cst.FunctionDef
    block: cst.IndentedBlock
    statement: cst.BaseStatement
    call: cst.Call


@dataclass
class FilePlan:
    path: str
    source: str
    module: cst.Module
    wraps: list[Wrap] = field(default_factory=list)
    inserts: list[Insert] = field(default_factory=list)
    decorations: list[tuple[Span, cst.FunctionDef]] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    present: list[Span | Hook] = field(default_factory=list)  # already instrumented: nothing to do
    # Where already-instrumented spans sit, so the hierarchy is the same on a patched tree.
    present_wraps: list[Wrap] = field(default_factory=list)
    present_decorations: list[tuple[Span, cst.FunctionDef]] = field(default_factory=list)


@dataclass
class Plan:
    files: dict[str, FilePlan]


class _Lines:
    """Line numbers, resolved on first use: the metadata pass costs as much as a parse, and only
    error messages need it."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.positions: Mapping[cst.CSTNode, CodeRange] | None = None

    def _get(self) -> Mapping[cst.CSTNode, CodeRange]:
        if self.positions is None:
            self.positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
        return self.positions

    def start(self, node: cst.CSTNode) -> int:
        return self._get()[node].start.line

    def end(self, node: cst.CSTNode) -> int:
        return self._get()[node].end.line


def parse_source(path: str, source: str) -> cst.Module:
    return cst.parse_module(source)


def build_plan(project: Project, source_root: Path, diags: Diagnostics | None = None) -> Plan:
    """Resolve every span; raise :class:`SpecError` listing every problem at once (including
    those already in ``diags``)."""
    diags = diags if diags is not None else Diagnostics()
    files: dict[str, FilePlan] = {}
    by_file: dict[str, list[Span | Hook]] = {}
    for entry in (*project.spans, *project.hooks):
        by_file.setdefault(entry.file, []).append(entry)
    root = source_root.resolve()
    for rel, spans in sorted(by_file.items()):
        path = (root / rel).resolve()
        if not path.is_relative_to(root):
            for span in spans:
                diags.error(span.where_file, f"file '{rel}' is outside the source root {root}")
            continue
        if not path.is_file():
            for span in spans:
                diags.error(span.where_file, f"file '{rel}' not found under the source root {root}")
            continue
        try:
            source = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            for span in spans:
                diags.error(span.where_file, f"'{rel}' is not UTF-8 text (byte {exc.start})")
            continue
        try:
            module = parse_source(rel, source)
        except cst.ParserSyntaxError as exc:
            for span in spans:
                diags.error(span.where_file, f"cannot parse '{rel}': {exc.message} (line {exc.raw_line})")
            continue
        lines = _Lines(module)
        plan = FilePlan(rel, source, module)
        _resolve_file(project, plan, spans, lines.start, lines.end, diags)
        _check_overlaps(plan, lines.start, lines.end, diags)
        files[rel] = plan
    if diags:
        raise SpecError(diags)
    return Plan(files)


def _resolve_file(
    project: Project,
    plan: FilePlan,
    spans: list[Span | Hook],
    line_of: Callable[[cst.CSTNode], int],
    end_line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> None:
    functions = collect_functions(plan.module)
    facts = _Facts(project.runtime.alias)
    clash = _alias_clash(plan.module, project.runtime.parent_module, project.runtime.alias)
    if clash is not None:
        diags.error(
            spans[0].where_file,
            f"{plan.path} already binds '{project.runtime.alias}' at line {line_of(clash)}; the runtime "
            f"import (from {project.runtime.parent_module} import {project.runtime.alias}) would clash with it",
        )
        return
    for span in spans:
        definitions = functions.get(span.function, [])
        if not definitions:
            diags.error(
                span.where_function,
                f"function '{span.function}' not found in {span.file}{suggest(span.function, sorted(functions))}",
            )
            continue
        if len(definitions) > 1:
            lines = ", ".join(str(line_of(d)) for d in definitions)
            diags.error(
                span.where_function,
                f"function '{span.function}' is defined {len(definitions)} times in {span.file} "
                f"(lines {lines}); instrumenting one of them is ambiguous",
            )
            continue
        func = definitions[0]
        if facts.instrumented(func, span):
            plan.present.append(span)
            if isinstance(span, Span):
                _locate_present(plan, span, func, project.runtime.alias, line_of, end_line_of)
            continue
        reason = facts.unsafe(func)
        if reason is None and isinstance(span, Span) and span.form != "decorator" and facts.taken_names(func):
            reason = (
                f"it already uses the name(s) {', '.join(sorted(facts.taken_names(func)))} the spans need"
            )
        if reason is not None:
            diags.error(span.where_function, f"cannot instrument {span.function} in {span.file}: {reason}")
            continue
        if not isinstance(func.body, cst.IndentedBlock):
            diags.error(
                span.where_function, f"cannot instrument {span.function}: its body is on the 'def' line"
            )
            continue
        if isinstance(span, Hook) and span.kind == "wrap":
            rewrite = _resolve_rewrite(span, func, project.runtime.alias, line_of, diags)
            if rewrite is not None and _wrapped(rewrite.call, span, rewrite.statement):
                plan.present.append(span)
            elif rewrite is not None:
                plan.rewrites.append(rewrite)
            continue
        if isinstance(span, Hook) and span.kind != "around":
            insert = _resolve_insert(span, func, line_of, diags)
            if insert is not None:
                plan.inserts.append(insert)
            continue
        if isinstance(span, Span) and span.form == "decorator":
            missing = [a.expr for a in span.attributes if a.expr not in _parameters(func)]
            if missing:
                diags.error(
                    span.attributes[0].pos,
                    f"a decorator span's attributes must name parameters of {span.function}; "
                    f"not parameters: {', '.join(missing)}",
                )
                continue
            plan.decorations.append((span, func))
            continue
        region = span.region if span.region is not None else Region("function", span.pos)
        resolved = _resolve_region(span, region, func, line_of, diags)
        if resolved is None:
            continue
        block, start, end = resolved
        if isinstance(span, Span) and span.form == "flat":
            exit_line = _early_exit(block.body[start:end], line_of)
            if exit_line is not None:
                diags.error(
                    span.pos,
                    f"a flat span cannot cover statements that leave the block early (line {exit_line}); "
                    "use form: try",
                )
                continue
        plan.wraps.append(Wrap(span, func, block, start, end, block_ancestry(func)[id(block)]))


def _locate_present(
    plan: FilePlan,
    span: Span,
    func: cst.FunctionDef,
    alias: str,
    line_of: Callable[[cst.CSTNode], int],
    end_line_of: Callable[[cst.CSTNode], int],
) -> None:
    """Record the statements an existing span construct occupies (its start through its end)."""
    if span.form == "decorator":
        plan.present_decorations.append((span, func))
        return
    for site in statement_sites(func):
        stmt = site.node
        if not m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())])])):
            continue
        if not _span_started(stmt, alias, span):
            continue
        var = stmt.body[0].targets[0].target.value  # type: ignore[attr-defined]
        block = site.block
        assert isinstance(block, cst.IndentedBlock)
        end_code = _compact(f"{var} and {var}.end()")

        def ends_span(stmt: cst.BaseStatement) -> bool:
            return (
                isinstance(stmt, cst.SimpleStatementLine)
                and _compact(cst.Module([]).code_for_node(stmt.body[0])) == end_code
            )

        following = block.body[site.index + 1] if site.index + 1 < len(block.body) else None
        if (
            isinstance(following, cst.Try)
            and following.finalbody
            and ends_span(following.finalbody.body.body[-1])
        ):  # type: ignore[union-attr]
            last = site.index + 1  # try form
        else:  # flat form: the first `var and var.end()` after the start in the same block
            last = next(
                (i for i in range(site.index + 1, len(block.body)) if ends_span(block.body[i])), site.index
            )
        plan.present_wraps.append(
            Wrap(span, func, block, site.index, last + 1, block_ancestry(func)[id(block)])
        )
        return


def _parameters(func: cst.FunctionDef) -> set[str]:
    params = func.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            every.append(star)
    return {p.name.value for p in every}


def _early_exit(stmts: tuple[cst.BaseStatement, ...], line_of: Callable[[cst.CSTNode], int]) -> int | None:
    """Line of a return, yield, or break/continue that would leave ``stmts`` early, if any."""

    class _Finder(cst.CSTVisitor):
        def __init__(self) -> None:
            self.loops = 0
            self.found: cst.CSTNode | None = None

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def _loop(self, node: cst.For | cst.While) -> bool:
            # break/continue in the loop body stay in the loop; in its else: they leave it
            self.loops += 1
            node.body.visit(self)
            self.loops -= 1
            if node.orelse is not None:
                node.orelse.visit(self)
            return False

        visit_For = visit_While = _loop  # type: ignore[assignment]

        def _exit(self, node: cst.CSTNode) -> None:
            if self.found is None:
                self.found = node

        def visit_Return(self, node: cst.Return) -> None:
            self._exit(node)

        def visit_Yield(self, node: cst.Yield) -> None:
            self._exit(node)

        def visit_Break(self, node: cst.Break) -> None:
            if not self.loops:
                self._exit(node)

        def visit_Continue(self, node: cst.Continue) -> None:
            if not self.loops:
                self._exit(node)

    finder = _Finder()
    for stmt in stmts:
        stmt.visit(finder)
        if finder.found is not None:
            return line_of(stmt)
    return None


def _resolve_rewrite(
    hook: Hook, func: cst.FunctionDef, alias: str, line_of: Callable[[cst.CSTNode], int], diags: Diagnostics
) -> Rewrite | None:
    assert hook.selector is not None and hook.wrapper is not None
    site = _select(hook, hook.selector, statement_sites(func), line_of, diags)
    if site is None:
        return None
    calls = [
        c
        for c in m.findall(site.node, m.Call())
        if isinstance(c, cst.Call) and get_full_name_for_node(c.func) == hook.selector.value
    ]
    if len(calls) != 1:
        diags.error(
            hook.selector.pos,
            f"line {line_of(site.node)} calls {hook.selector.value} {len(calls)} times; wrap needs one",
        )
        return None
    call = calls[0]
    if hook.argument is not None and argument_index(call, hook.argument) is None:
        diags.error(
            hook.selector.pos, f"the call on line {line_of(site.node)} has no argument {hook.argument}"
        )
        return None
    if not isinstance(site.block, cst.IndentedBlock):
        diags.error(hook.pos, "cannot rewrite a statement of a one-line block")
        return None
    return Rewrite(hook, func, site.block, site.node, call)


def argument_index(call: cst.Call, argument: int | str) -> int | None:
    """Index in ``call.args`` of a positional argument (by position) or a keyword (by name)."""
    if isinstance(argument, str):
        return next(
            (i for i, a in enumerate(call.args) if a.keyword is not None and a.keyword.value == argument),
            None,
        )
    positional = [i for i, a in enumerate(call.args) if a.keyword is None and not a.star]
    return positional[argument] if argument < len(positional) else None


def _wrapped(rewrite_call: cst.Call, hook: Hook, statement: cst.BaseStatement) -> bool:
    """Whether the rewrite is already applied (a second run must change nothing)."""
    if hook.argument is not None:
        value = rewrite_call.args[argument_index(rewrite_call, hook.argument)].value  # type: ignore[index]
        return isinstance(value, cst.Call) and get_full_name_for_node(value.func) == hook.wrapper
    return any(
        isinstance(c, cst.Call)
        and get_full_name_for_node(c.func) == hook.wrapper
        and any(a.value is rewrite_call for a in c.args)
        for c in m.findall(statement, m.Call())
    )


def _resolve_insert(
    hook: Hook, func: cst.FunctionDef, line_of: Callable[[cst.CSTNode], int], diags: Diagnostics
) -> Insert | None:
    body = func.body
    assert isinstance(body, cst.IndentedBlock)
    if hook.kind == "entry":
        index = 1 if _has_docstring(body) else 0
        return Insert(hook, func, body, index)
    assert hook.selector is not None
    site = _select(hook, hook.selector, statement_sites(func), line_of, diags)
    if site is None:
        return None
    block = site.block
    if not isinstance(block, cst.IndentedBlock):
        diags.error(hook.pos, "cannot insert into a one-line block; the block must be indented")
        return None
    index = site.index + (1 if hook.kind == "after" else 0)
    return Insert(hook, func, block, index)


def _compact(code: str) -> str:
    """What an expression means, without its layout: parentheses, line breaks, trailing commas and
    implicitly concatenated strings all vanish, so a rendered call compares equal to the spec's."""
    try:
        return ast.dump(ast.parse(code.strip(), mode="eval"))
    except SyntaxError:
        return code


def _hook_statement_code(hook: Hook, alias: str) -> list[str]:
    calls = [c for c in (hook.call, hook.enter, hook.exit) if c]
    prefix = f"{alias}.{hook.guard} and " if hook.guard else ""
    return [_compact(prefix + c) for c in calls]


class _Facts:
    """What resolution asks of each function, gathered in one walk: a function such as ``train``
    holds dozens of specs' statements, and each question is otherwise a walk over its whole tree."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._scans: dict[int, _Scan] = {}

    def _scan(self, func: cst.FunctionDef) -> _Scan:
        scan = self._scans.get(id(func))
        if scan is None:
            scan = self._scans[id(func)] = _Scan(func, self.alias)
            func.visit(scan)
        return scan

    def unsafe(self, func: cst.FunctionDef) -> str | None:
        return unsafe_reason(func, is_generator=self._scan(func).generator)

    def taken_names(self, func: cst.FunctionDef) -> set[str]:
        """``_otel_span*`` names the function uses although no span of ours is in it yet."""
        scan = self._scan(func)
        return set() if scan.started else scan.span_names

    def instrumented(self, func: cst.FunctionDef, entry: Span | Hook) -> bool:
        scan = self._scan(func)
        if isinstance(entry, Hook):
            if entry.kind == "wrap":
                return False  # decided once the call is found
            return all(code in scan.statement_codes() for code in _hook_statement_code(entry, self.alias))
        return any(_names_span(first, entry) for first in scan.started)


class _Scan(cst.CSTVisitor):
    """One walk of a function: does it yield, which spans it already starts, which expression
    statements it already has (to recognize hooks applied before)."""

    def __init__(self, func: cst.FunctionDef, alias: str) -> None:
        super().__init__()
        self.func = func
        self.alias = alias
        self.generator = False
        self.started: list[cst.BaseExpression] = []
        self.statements: list[cst.Expr] = []
        self.span_names: set[str] = set()
        self._codes: set[str] | None = None
        self._nested = 0

    def statement_codes(self) -> set[str]:
        if self._codes is None:
            self._codes = {_compact(cst.Module([]).code_for_node(e)) for e in self.statements}
        return self._codes

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node is not self.func:
            self._nested += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if original_node is not self.func:
            self._nested -= 1

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._nested += 1

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self._nested -= 1

    def visit_Name(self, node: cst.Name) -> None:
        if node.value.startswith(SPAN_VARIABLE):
            self.span_names.add(node.value)

    def visit_Yield(self, node: cst.Yield) -> None:
        if not self._nested:
            self.generator = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (
            node.args
            and isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == self.alias
            and func.attr.value in ("start_span", "traced")
        ):
            self.started.append(node.args[0].value)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        expr = node.body[0]
        # hooks are calls or `otel.FLAG and call`: skip docstrings and other bare expressions
        if (
            len(node.body) == 1
            and isinstance(expr, cst.Expr)
            and isinstance(expr.value, (cst.Call, cst.BooleanOperation))
        ):
            self.statements.append(expr)


def _alias_clash(module: cst.Module, parent: str, alias: str) -> cst.CSTNode | None:
    """A top-level statement binding ``alias`` to something other than the runtime package."""
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == alias:
            return stmt
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
                small.names, cst.ImportStar
            ):
                source = (
                    cst.Module([]).code_for_node(small.module)
                    if isinstance(small, cst.ImportFrom) and small.module
                    else ""
                )
                for name in small.names:
                    bound = (
                        name.asname.name.value
                        if name.asname
                        else cst.Module([]).code_for_node(name.name).split(".")[0]
                    )  # type: ignore[union-attr]
                    ours = (
                        isinstance(small, cst.ImportFrom)
                        and not small.relative
                        and source == parent
                        and name.asname is None
                    )
                    if bound == alias and not ours:
                        return stmt
            if isinstance(small, cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == alias for t in small.targets
            ):
                return stmt
    return None


def _started_names(node: cst.CSTNode, alias: str) -> list[cst.BaseExpression]:
    """The first argument of every ``alias.start_span(...)`` / ``alias.traced(...)`` in ``node``."""
    pattern = m.Call(
        func=m.Attribute(value=m.Name(alias), attr=m.Name("start_span") | m.Name("traced")),
        args=[m.Arg(), m.ZeroOrMore()],
    )
    return [call.args[0].value for call in m.findall(node, pattern)]  # type: ignore[union-attr]


def _names_span(first: cst.BaseExpression, entry: Span) -> bool:
    if entry.name_expr is not None:
        return " ".join(cst.Module([]).code_for_node(first).split()) == entry.name_expr
    return isinstance(first, cst.SimpleString) and first.evaluated_value == entry.name


def _span_started(node: cst.CSTNode, alias: str, entry: Span) -> bool:
    """Whether ``node`` contains the start (or decorator) of span ``entry``."""
    return any(_names_span(first, entry) for first in _started_names(node, alias))


def _has_docstring(block: cst.IndentedBlock) -> bool:
    if not block.body:
        return False
    return m.matches(
        block.body[0],
        m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())]),
    )


def _resolve_region(
    span: Span | Hook,
    region: Region,
    func: cst.FunctionDef,
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> tuple[cst.IndentedBlock, int, int] | None:
    body = func.body
    assert isinstance(body, cst.IndentedBlock)
    if region.kind == "function":
        start = 1 if _has_docstring(body) else 0
        if start >= len(body.body):
            diags.error(span.pos, f"{span.function} has no statements to wrap")
            return None
        return body, start, len(body.body)
    sites = statement_sites(func)
    assert region.first is not None
    first = _select(span, region.first, sites, line_of, diags)
    if first is None:
        return None
    if region.kind == "statement":
        return _indented(span, first.block, diags, first.index, first.index + 1)
    if region.kind == "range":
        assert region.last is not None
        last = _select(span, region.last, sites, line_of, diags)
        if last is None:
            return None
        if last.block is not first.block or last.index < first.index:
            diags.error(
                region.last.pos,
                f"range end {region.last.describe()} (line {line_of(last.node)}) is not after "
                f"{region.first.describe()} (line {line_of(first.node)}) in the same block",
            )
            return None
        return _indented(span, first.block, diags, first.index, last.index + 1)
    if region.kind == "after":
        if first.index + 1 >= len(_block_body(first.block)):
            diags.error(region.first.pos, f"nothing follows {region.first.describe()} in its block")
            return None
        return _indented(span, first.block, diags, first.index + 1, len(_block_body(first.block)))
    # body / else-body of a compound statement
    stmt = first.node
    if region.branch == "else":
        orelse = getattr(stmt, "orelse", None)
        if not isinstance(orelse, cst.Else):
            diags.error(region.first.pos, f"{region.first.describe()} has no plain 'else:' branch")
            return None
        block = orelse.body
    else:
        block = stmt.body  # type: ignore[attr-defined]
    return _indented(span, block, diags, 0, len(_block_body(block)))


def _block_body(block: cst.BaseSuite) -> tuple[cst.BaseStatement, ...] | tuple[cst.BaseSmallStatement, ...]:
    return tuple(block.body)


def _indented(
    span: Span | Hook, block: cst.BaseSuite, diags: Diagnostics, start: int, end: int
) -> tuple[cst.IndentedBlock, int, int] | None:
    if not isinstance(block, cst.IndentedBlock):
        diags.error(span.pos, "cannot wrap statements of a one-line block; the block must be indented")
        return None
    return block, start, end


def _select(
    span: Span | Hook,
    selector: Selector,
    sites: list[StatementSite],
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> StatementSite | None:
    pool = sites
    if selector.within is not None:
        owner = _select(span, selector.within, sites, line_of, diags)
        if owner is None:
            return None
        pool = [s for s in sites if owner.node in s.ancestors]
    found = [s for s in pool if matches(selector, s)]
    scope = f"{span.function}" + (f" within {selector.within.describe()}" if selector.within else "")
    if selector.occurrence is not None:
        if selector.occurrence > len(found):
            diags.error(
                selector.pos,
                f"selector {selector.describe()} asks for occurrence {selector.occurrence} but "
                f"{scope} has {len(found)} matching statement(s)",
                _candidates(found, line_of),
            )
            return None
        return found[selector.occurrence - 1]
    if not found:
        near = [s for s in sites if _near_miss(selector, s)]
        notes = ["statements of the same kind:"] + _candidates(near, line_of) if near else []
        diags.error(selector.pos, f"selector {selector.describe()} matches no statement in {scope}", notes)
        return None
    if len(found) > 1:
        diags.error(
            selector.pos,
            f"selector {selector.describe()} matches {len(found)} statements in {scope}; "
            "narrow it with 'within' or 'occurrence'",
            _candidates(found, line_of),
        )
        return None
    return found[0]


def _near_miss(selector: Selector, site: StatementSite) -> bool:
    if selector.kind in ("call", "assign"):
        return False
    return type(site.node).__name__.lower() == selector.kind


def _candidates(sites: list[StatementSite], line_of: Callable[[cst.CSTNode], int]) -> list[str]:
    return [f"line {line_of(s.node)}: {first_line_code(s.node)}" for s in sites[:12]]


def _check_overlaps(
    plan: FilePlan,
    line_of: Callable[[cst.CSTNode], int],
    end_line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> None:
    by_block: dict[int, list[Wrap]] = {}
    for wrap in plan.wraps:
        by_block.setdefault(id(wrap.block), []).append(wrap)
    for wraps in by_block.values():
        for i, a in enumerate(wraps):
            for b in wraps[i + 1 :]:
                disjoint = a.end <= b.start or b.end <= a.start
                nested = (a.start <= b.start and b.end <= a.end) or (b.start <= a.start and a.end <= b.end)
                if not (disjoint or nested):
                    a_lines = f"{line_of(a.block.body[a.start])}-{end_line_of(a.block.body[a.end - 1])}"
                    b_lines = f"{line_of(b.block.body[b.start])}-{end_line_of(b.block.body[b.end - 1])}"
                    diags.error(
                        b.entry.pos,
                        f"{_label(b.entry)} (lines {b_lines}) partially overlaps "
                        f"{_label(a.entry)} (lines {a_lines}) declared at {a.entry.pos.ref(b.entry.pos)}",
                    )


def _label(entry: Span | Hook) -> str:
    return f"span '{entry.name}'" if isinstance(entry, Span) else f"hook in {entry.function}"
