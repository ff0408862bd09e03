"""Bind every span of the project to a contiguous run of statements in the parsed source.

The result is a :class:`Plan`: per file, the parsed module and the wraps to apply. Every problem
(missing file, unknown function, selector with zero or several matches, unsafe target, overlap)
is reported with the span's spec location and, where useful, the candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import libcst as cst
import libcst.matchers as m
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from codegen.diagnostics import Diagnostics, SpecError
from codegen.resolve.alternatives import concrete
from codegen.resolve.expressions import check_expressions
from codegen.resolve.functions import collect_functions, suggest
from codegen.resolve.hooks import is_wrapped, resolve_insert, resolve_rewrite
from codegen.resolve.regions import early_exit, parameters, resolve_region
from codegen.resolve.scan import Facts, alias_clash, compact, span_started
from codegen.resolve.sites import FilePlan, Plan, Wrap
from codegen.resolve.statements import (
    block_ancestry,
    statement_sites,
)
from codegen.spec.model import Hook, Project, Region, Span


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
    trees: dict[str, cst.Module | None] = {}  # modules parsed for the expression checks
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
        trees[rel] = module
        check_expressions(
            plan, project.runtime.alias, root, diags, trees, lambda n, end: (lines.end if end else lines.start)(n)
        )
        files[rel] = plan
    if diags:
        raise SpecError(diags)
    return Plan(files, tuple(sorted(rel for rel, tree in trees.items() if tree is not None and rel not in files)))


def _resolve_file(
    project: Project,
    plan: FilePlan,
    spans: list[Span | Hook],
    line_of: Callable[[cst.CSTNode], int],
    end_line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> None:
    functions = collect_functions(plan.module)
    facts = Facts(project.runtime.alias)
    clash = alias_clash(plan.module, project.runtime.parent_module, project.runtime.alias)
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
        chosen = concrete(span, func, line_of, diags)  # each ``any`` selector bound to one alternative
        if chosen is None:
            continue
        if chosen is not span:
            plan.chosen[id(span)] = chosen
            span = chosen
        if facts.instrumented(func, span):
            plan.present.append(span)
            if isinstance(span, Span):
                _locate_present(plan, span, func, project.runtime.alias, line_of, end_line_of)
            continue
        reason = facts.unsafe(func)
        local = facts.local_alias(func)
        if reason is None and local is not None:
            reason = f"it binds the name '{project.runtime.alias}' itself (line {line_of(local)}), which the generated code needs"
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
            rewrite = resolve_rewrite(span, func, project.runtime.alias, line_of, diags)
            if rewrite is not None and is_wrapped(rewrite.call, span, rewrite.statement):
                plan.present.append(span)
            elif rewrite is not None:
                plan.rewrites.append(rewrite)
            continue
        if isinstance(span, Hook) and span.kind != "around":
            insert = resolve_insert(span, func, line_of, diags)
            if insert is not None:
                plan.inserts.append(insert)
            continue
        if isinstance(span, Span) and span.form == "decorator":
            missing = [a.expr for a in span.attributes if a.expr not in parameters(func)]
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
        resolved = resolve_region(span, region, func, line_of, diags)
        if resolved is None:
            continue
        block, start, end = resolved
        if isinstance(span, Span) and span.form == "flat":
            exit_line = early_exit(block.body[start:end], line_of)
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
        if not span_started(stmt, alias, span):
            continue
        var = stmt.body[0].targets[0].target.value  # type: ignore[attr-defined]
        block = site.block
        assert isinstance(block, cst.IndentedBlock)
        end_code = compact(f"{var} and {var}.end()")

        def ends_span(stmt: cst.BaseStatement) -> bool:
            return (
                isinstance(stmt, cst.SimpleStatementLine)
                and compact(cst.Module([]).code_for_node(stmt.body[0])) == end_code
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
