"""Bind every span of the project to a contiguous run of statements in the parsed source.

The result is a :class:`Plan`: per file, the parsed module and the wraps to apply. Every problem
(missing file, unknown function, selector with zero or several matches, unsafe target, overlap)
is reported with the span's spec location and, where useful, the candidates.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from codegen.diagnostics import Diagnostics, InFile, SpecError
from codegen.resolve.alternatives import concrete
from codegen.resolve.bindings import Bindings, Shadow
from codegen.resolve.expressions import check_expressions
from codegen.resolve.frames import frame_refusal
from codegen.resolve.functions import collect_functions, import_aliases, suggest
from codegen.resolve.hooks import resolve_insert, resolve_rewrite
from codegen.resolve.hostile import parse_module
from codegen.resolve.regions import early_exit, parameters, resolve_region
from codegen.resolve.scan import Facts, hook_codes
from codegen.resolve.sites import FilePlan, Plan, Wrap
from codegen.resolve.statements import (
    block_ancestry,
)
from codegen.resolve.strip import strip
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

    def line(self, node: cst.CSTNode, end: bool) -> int:
        return self.end(node) if end else self.start(node)


def parse_source(path: str, source: str) -> cst.Module:
    return parse_module(source)  # refuses what would crash libcst (resolve/hostile.py)


def build_plan(project: Project, source_root: Path, diags: Diagnostics | None = None) -> Plan:
    """Resolve every span; raise :class:`SpecError` listing every problem at once (including
    those already in ``diags``)."""
    diags = diags if diags is not None else Diagnostics()
    files: dict[str, FilePlan] = {}
    by_file: dict[str, list[Span | Hook]] = {}
    for entry in project.entries():
        by_file.setdefault(entry.file, []).append(entry)
    root = source_root.resolve()
    trees: dict[str, cst.Module | None] = {}  # modules parsed for the expression checks
    for rel, spans in sorted(by_file.items()):
        path = (root / rel).resolve()
        if not path.is_relative_to(root):
            for span in spans:
                diags.error(span.where_file, f"file '{rel}' is outside the source root {root}")
            continue
        if rel.startswith(project.runtime.package + "/"):
            for span in spans:
                diags.error(
                    span.where_file,
                    f"'{rel}' is part of the runtime package {project.runtime.package}: instrumenting it "
                    "would import the runtime from inside itself (an import cycle)",
                )
            continue
        if not path.is_file():
            for span in spans:
                diags.error(span.where_file, f"file '{rel}' not found under the source root {root}")
            continue
        try:
            source = path.read_bytes().decode("utf-8")  # CRLF stays CRLF (read_text would not)
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
        alias = project.runtime.alias
        hooks = [e for e in spans if isinstance(e, Hook)]
        if _maybe_instrumented(source, alias, hooks):
            # Maybe an instrumented tree: instrument what the specs declare from scratch (strip.py).
            module = strip(module, alias, project.runtime.parent_module, hook_codes(hooks, alias))
        lines = _Lines(module)
        plan = FilePlan(rel, source, module)
        in_file = InFile.of(diags, rel)  # every message names the file
        _resolve_file(project, plan, spans, lines.start, lines.end, in_file)
        _check_overlaps(plan, lines.start, lines.end, in_file)
        trees[rel] = module
        check_expressions(plan, project.runtime.alias, root, in_file, trees, lines.line)
        files[rel] = plan
    if diags:
        raise SpecError(diags)
    return Plan(
        files, tuple(sorted(rel for rel, tree in trees.items() if tree is not None and rel not in files))
    )


def _resolve_file(
    project: Project,
    plan: FilePlan,
    spans: list[Span | Hook],
    line_of: Callable[[cst.CSTNode], int],
    end_line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> None:
    functions = collect_functions(plan.module)
    facts = Facts(project.runtime.alias, import_aliases(plan.module))
    bindings = Bindings(plan.module, plan.source, project.runtime.alias, project.runtime.parent_module)
    clash = bindings.module_shadow()
    if clash is not None:
        diags.error(
            spans[0].where_file,
            f"{plan.path} already binds '{project.runtime.alias}' at line {line_of(clash)}; the runtime "
            f"import (from {project.runtime.parent_module} import {project.runtime.alias}) would clash with it",
        )
        return
    for span in spans:
        func = _definition(span, functions, line_of, diags)
        if func is None:
            continue
        chosen = concrete(span, func, line_of, diags)  # each ``any`` selector bound to one alternative
        if chosen is None:
            continue
        if chosen is not span:
            plan.chosen[id(span)] = chosen
            span = chosen
        reason = _refusal(span, func, facts, bindings, project.runtime.alias, line_of)
        if reason is not None:
            diags.error(span.where_function, f"cannot instrument {span.function} in {span.file}: {reason}")
            continue
        if not isinstance(func.body, cst.IndentedBlock):
            diags.error(
                span.where_function, f"cannot instrument {span.function}: its body is on the 'def' line"
            )
            continue
        _place(project, plan, span, func, line_of, diags)


def _definition(
    span: Span | Hook,
    functions: dict[str, list[cst.FunctionDef]],
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> cst.FunctionDef | None:
    """The one definition of the function an entry names, or None (reported)."""
    definitions = functions.get(span.function, [])
    if not definitions:
        diags.error(
            span.where_function,
            f"function '{span.function}' not found in {span.file}{suggest(span.function, sorted(functions))}",
        )
        return None
    if len(definitions) > 1:
        lines = ", ".join(str(line_of(d)) for d in definitions)
        diags.error(
            span.where_function,
            f"function '{span.function}' is defined {len(definitions)} times in {span.file} "
            f"(lines {lines}); instrumenting one of them is ambiguous",
        )
        return None
    return definitions[0]


def _refusal(
    span: Span | Hook,
    func: cst.FunctionDef,
    facts: Facts,
    bindings: Bindings,
    alias: str,
    line_of: Callable[[cst.CSTNode], int],
) -> str | None:
    """Why the function cannot be instrumented (unsafe, a shadowed runtime name, a taken span
    variable), or None."""
    reason = facts.unsafe(func)
    if reason is None:
        decorator = isinstance(span, Span) and span.form == "decorator"
        reason = _shadow_reason(bindings.shadow(func, decorator), alias, line_of)
    if reason is None and isinstance(span, Span) and span.form != "decorator" and facts.taken_names(func):
        reason = f"it already uses the name(s) {', '.join(sorted(facts.taken_names(func)))} the spans need"
    return reason if reason is not None else frame_refusal(span, func, line_of)


def _place(
    project: Project,
    plan: FilePlan,
    span: Span | Hook,
    func: cst.FunctionDef,
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> None:
    """Add the entry to the plan as a rewrite, an insert, a decoration or a wrap (or report why not)."""
    if isinstance(span, Hook) and span.kind == "wrap":
        rewrite = resolve_rewrite(span, func, project.runtime.alias, line_of, diags)
        if rewrite is not None:
            plan.rewrites.append(rewrite)
        return
    if isinstance(span, Hook) and span.kind != "around":
        insert = resolve_insert(span, func, line_of, diags)
        if insert is not None:
            plan.inserts.append(insert)
        return
    if isinstance(span, Span) and span.form == "decorator":
        missing = [a.expr for a in span.attributes if a.expr not in parameters(func)]
        if missing:
            diags.error(
                span.attributes[0].pos,
                f"a decorator span's attributes must name parameters of {span.function}; "
                f"not parameters: {', '.join(missing)}",
            )
            return
        plan.decorations.append((span, func))
        return
    region = span.region if span.region is not None else Region("function", span.pos)
    resolved = resolve_region(span, region, func, line_of, diags)
    if resolved is None:
        return
    block, start, end = resolved
    if isinstance(span, Span) and span.form == "flat":
        exit_line = early_exit(block.body[start:end], line_of)
        if exit_line is not None:
            diags.error(
                span.pos,
                f"a flat span cannot cover statements that leave the block early (line {exit_line}); "
                "use form: try",
            )
            return
    plan.wraps.append(Wrap(span, func, block, start, end, block_ancestry(func)[id(block)]))


def _maybe_instrumented(source: str, alias: str, hooks: list[Hook]) -> bool:
    """Whether ``source`` may hold our constructs: it names the runtime, or it holds the text of a
    hook that calls something else (its longest string literal, else its callee)."""
    if re.search(rf"(?<![\w.]){re.escape(alias)}\b", source):
        return True
    for hook in hooks:
        for code in (hook.call, hook.enter, hook.exit):
            if code is None or code.startswith(f"{alias}."):
                continue
            tree = ast.parse(code, mode="eval")
            strings = [
                n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
            callee = ast.unparse(tree.body.func) if isinstance(tree.body, ast.Call) else code
            if max(strings, key=len, default=callee) in source:
                return True
    return False


def _shadow_reason(shadow: Shadow | None, alias: str, line_of: Callable[[cst.CSTNode], int]) -> str | None:
    if shadow is None:
        return None
    line = line_of(shadow.node)
    if shadow.where == "function":
        return f"it binds the name '{alias}' itself (line {line}), which the generated code needs"
    kind = "class" if shadow.where == "class" else "enclosing function"
    return (
        f"the {kind} '{shadow.scope_name}' binds the name '{alias}' (line {line}), which the "
        f"generated code would read instead of the runtime module"
    )


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
