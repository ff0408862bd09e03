"""Bind every span of the project to a contiguous run of statements in the parsed source.

The result is a :class:`Plan`: per file, the parsed module and the wraps to apply. Every problem
(missing file, unknown function, selector with zero or several matches, unsafe target, overlap)
is reported with the span's spec location and, where useful, the candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import assert_never

import libcst as cst

from codegen.diagnostics import Diagnostic, Diagnostics, InFile, Pos, SpecError
from codegen.resolve.alternatives import concrete
from codegen.resolve.at_exit import at_exit_functions
from codegen.resolve.bindings import Bindings, Shadow
from codegen.resolve.context import FileContext
from codegen.resolve.expressions import check_expressions
from codegen.resolve.frames import frame_refusal
from codegen.resolve.functions import collect_functions, import_aliases, suggest
from codegen.resolve.hooks import resolve_insert, resolve_rewrite
from codegen.resolve.regions import early_exit, parameters, resolve_region, suspension
from codegen.resolve.scan import Facts
from codegen.resolve.sites import EntryResult, FilePlan, Plan, Resolution, Wrap
from codegen.resolve.statements import block_ancestry
from codegen.resolve.streams import resolve_stream
from codegen.spec.model import AroundHook, EntryHook, Hook, Project, Region, Span, StatementHook, WrapHook
from codegen.strip.hostile import parse_module


class _Outcomes:
    """Each entry's own diagnostics: an entry with an error is left out of the plan (and every
    other entry is placed as if it had never been declared)."""

    def __init__(self, diags: Diagnostics) -> None:
        self.diags = diags  # warnings go straight here
        self.errors: dict[int, list[Diagnostic]] = {}
        self.owner: dict[int, Span | Hook] = {}  # id(entry or its chosen form) -> the entry
        self.file = ""  # the source file being resolved: every message names it

    def of(self, entry: Span | Hook) -> Diagnostics:
        """A collector for ``entry`` (or the form an ``any`` selector chose for it)."""
        original = self.owner.get(id(entry), entry)
        return InFile(self.errors.setdefault(id(original), []), self.diags.warnings, self.file)

    def all(self, entries: list[Span | Hook], pos: Pos, message: str) -> None:
        """One problem shared by ``entries`` (a file that cannot be read or instrumented)."""
        diagnostic = Diagnostic(pos, message)
        for entry in entries:
            self.errors.setdefault(id(entry), []).append(diagnostic)

    def failed(self, entry: Span | Hook) -> bool:
        return bool(self.errors.get(id(self.owner.get(id(entry), entry))))


def resolve(
    project: Project,
    source_root: Path,
    diags: Diagnostics | None = None,
    overlay: Mapping[str, cst.Module] | None = None,
) -> Resolution:
    """Place every entry of ``project``: each is placed or failed with its own diagnostics;
    nothing raises. Warnings are added to ``diags``. ``overlay``: files (relative to the root) to
    plan from this module instead of their text, stripped of instrumentation (``codegen.strip``:
    the pipeline's ``strip_sources``); the file's own text stays the plan's source."""
    diags = diags if diags is not None else Diagnostics()
    outcomes = _Outcomes(diags)
    files: dict[str, FilePlan] = {}
    by_file: dict[str, list[Span | Hook]] = {}
    for entry in project.entries():
        by_file.setdefault(entry.file, []).append(entry)
    root = source_root.resolve()
    trees: dict[str, cst.Module | None] = {}  # modules parsed for the expression checks
    for rel, spans in sorted(by_file.items()):
        file_plan = _resolve_path(project, root, rel, spans, outcomes, trees, (overlay or {}).get(rel))
        if file_plan is not None and any(not outcomes.failed(e) for e in spans):
            files[rel] = file_plan
    results = tuple(
        EntryResult(entry, "failed", tuple(sorted(set(outcomes.errors[id(entry)]))))
        if outcomes.errors.get(id(entry))
        else EntryResult(entry, "placed")
        for entry in project.entries()
    )
    also_read = tuple(sorted(rel for rel, tree in trees.items() if tree is not None and rel not in by_file))
    return Resolution(Plan(files, also_read), results)


def build_plan(project: Project, source_root: Path, diags: Diagnostics | None = None) -> Plan:
    """The plan of ``project`` on a pristine tree; raise :class:`SpecError` listing every problem
    at once (including those already in ``diags``)."""
    diags = diags if diags is not None else Diagnostics()
    resolution = resolve(project, source_root, diags)
    for _, found in resolution.failures():
        diags.items.extend(found)
    if diags:
        raise SpecError(diags)
    return resolution.plan


def _resolve_path(
    project: Project,
    root: Path,
    rel: str,
    spans: list[Span | Hook],
    outcomes: _Outcomes,
    trees: dict[str, cst.Module | None],
    stripped: cst.Module | None = None,
) -> FilePlan | None:
    outcomes.file = rel
    path = (root / rel).resolve()

    def refuse(message: str) -> None:
        for span in spans:
            outcomes.of(span).error(span.where_file, message)

    if not path.is_relative_to(root):
        refuse(f"file '{rel}' is outside the source root {root}")
        return None
    if rel.startswith(project.runtime.package + "/"):
        refuse(
            f"'{rel}' is part of the runtime package {project.runtime.package}: instrumenting it "
            "would import the runtime from inside itself (an import cycle)"
        )
        return None
    if not path.is_file():
        refuse(f"file '{rel}' not found under the source root {root}")
        return None
    try:
        source = path.read_bytes().decode("utf-8")  # CRLF stays CRLF (read_text would not)
    except UnicodeDecodeError as exc:
        refuse(f"'{rel}' is not UTF-8 text (byte {exc.start})")
        return None
    try:
        module = stripped if stripped is not None else parse_module(source)  # strip/hostile.py
    except cst.ParserSyntaxError as exc:
        refuse(f"cannot parse '{rel}': {exc.message} (line {exc.raw_line})")
        return None
    alias = project.runtime.alias
    context = FileContext(rel, source, module, stripped=stripped is not None)
    plan = FilePlan(rel, source, module, context)
    trees[rel] = module
    if not _resolve_file(project, plan, spans, outcomes):
        return None
    check_expressions(context, plan, alias, root, outcomes.of, trees)
    _drop_failed(plan, outcomes)
    _check_overlaps(plan, context.start, context.end, outcomes)
    _drop_failed(plan, outcomes)
    return plan


def _drop_failed(plan: FilePlan, outcomes: _Outcomes) -> None:
    """Leave out what failed entries placed."""
    plan.wraps = [w for w in plan.wraps if not outcomes.failed(w.entry)]
    plan.inserts = [i for i in plan.inserts if not outcomes.failed(i.hook)]
    plan.decorations = [d for d in plan.decorations if not outcomes.failed(d[0])]
    plan.rewrites = [r for r in plan.rewrites if not outcomes.failed(r.hook)]
    plan.streams = [s for s in plan.streams if not outcomes.failed(s[0])]


def _resolve_file(project: Project, plan: FilePlan, spans: list[Span | Hook], outcomes: _Outcomes) -> bool:
    """Place each entry of one file; False when the file itself cannot be instrumented."""
    context = plan.context
    line_of = context.start
    functions = collect_functions(plan.module)
    plan.at_exit = at_exit_functions(functions)
    # the generated code reads the runtime as ``_otel`` (the specs' ``otel`` is rewritten to it):
    # that is the name nothing else in the file may bind (``otel`` is the file's to use)
    binding = project.runtime.binding
    facts = Facts(binding, import_aliases(plan.module))
    bindings = Bindings(plan.module, plan.source, binding, project.runtime.module)
    clash = bindings.module_shadow()
    seen: dict[int, list[cst.Call]] = {}  # each function's calls, for frame_refusal
    if clash is not None:
        outcomes.all(
            spans,
            spans[0].where_file,
            f"{plan.path} already binds '{binding}' at line {line_of(clash)}; the runtime "
            f"import ({project.runtime.import_statement}) would clash with it",
        )
        return False
    for span in spans:
        diags = outcomes.of(span)
        func = _definition(span, functions, line_of, diags)
        if func is None:
            continue
        chosen = concrete(span, func, line_of, diags)  # each ``any`` selector bound to one alternative
        if chosen is None:
            continue
        if chosen is not span:
            plan.chosen[id(span)] = chosen
            outcomes.owner[id(chosen)] = span
            span = chosen
        reason = _refusal(span, func, facts, bindings, binding, line_of, context.column, seen)
        if reason is not None:
            diags.error(span.where_function, f"cannot instrument {span.function} in {span.file}: {reason}")
            continue
        if not isinstance(func.body, cst.IndentedBlock):
            diags.error(
                span.where_function, f"cannot instrument {span.function}: its body is on the 'def' line"
            )
            continue
        _place(project, plan, span, func, line_of, diags)
    return True


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
    binding: str,
    line_of: Callable[[cst.CSTNode], int],
    column_of: Callable[[cst.CSTNode], int],
    seen: dict[int, list[cst.Call]],
) -> str | None:
    """Why the function cannot be instrumented (unsafe, a shadowed runtime name, a taken span
    variable), or None."""
    reason = facts.unsafe(func)
    if reason is None:
        decorator = isinstance(span, Span) and span.form == "decorator"
        reason = _shadow_reason(bindings.shadow(func, decorator), binding, line_of)
    if reason is None and isinstance(span, Span) and span.form != "decorator" and facts.taken_names(func):
        reason = f"it already uses the name(s) {', '.join(sorted(facts.taken_names(func)))} the spans need"
    return reason if reason is not None else frame_refusal(span, func, line_of, column_of, seen)


def _place(
    project: Project,
    plan: FilePlan,
    span: Span | Hook,
    func: cst.FunctionDef,
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> None:
    """Add the entry to the plan as a rewrite, an insert, a decoration or a wrap (or report why not)."""
    match span:
        case WrapHook():
            rewrite = resolve_rewrite(span, func, project.runtime.alias, line_of, diags)
            if rewrite is not None:
                plan.rewrites.append(rewrite)
            return
        case EntryHook() | StatementHook():
            insert = resolve_insert(span, func, line_of, diags)
            if insert is not None:
                plan.inserts.append(insert)
            return
        case Span() | AroundHook():
            _place_wrap(plan, span, func, line_of, diags)
        case _:
            assert_never(span)


def _place_wrap(
    plan: FilePlan,
    span: Span | AroundHook,
    func: cst.FunctionDef,
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> None:
    """A span (decorated or wrapping statements) or an around hook."""
    if isinstance(span, Span) and span.form == "decorator":
        if span.stream is not None:
            if func.asynchronous is None:
                diags.error(
                    span.stream.pos,
                    f"a decorator span's stream: needs a coroutine (async def); {span.function} is "
                    "not one: use form: try",
                )
                return
            body = func.body
            assert isinstance(body, cst.IndentedBlock)
            site = resolve_stream(span, func, body, 0, len(body.body), line_of, diags)
            if site is None:
                return
            plan.streams.append((span, func, site))
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
        suspends = suspension(block.body[start:end], line_of)
        if suspends is not None:
            diags.error(
                span.pos,
                f"a flat span cannot cover an await (line {suspends}): a cancelled task would never "
                "reach its end; use form: try",
            )
            return
    stream = None
    if isinstance(span, Span) and span.stream is not None:
        stream = resolve_stream(span, func, block, start, end, line_of, diags)
        if stream is None:
            return
    plan.wraps.append(Wrap(span, func, block, start, end, block_ancestry(func)[id(block)], stream))


def _shadow_reason(shadow: Shadow | None, binding: str, line_of: Callable[[cst.CSTNode], int]) -> str | None:
    """Why a binding of ``binding`` (the runtime's name in generated code) refuses a function."""
    if shadow is None:
        return None
    line = line_of(shadow.node)
    if shadow.where == "function":
        return f"it binds the name '{binding}' itself (line {line}), which the generated code needs"
    kind = "class" if shadow.where == "class" else "enclosing function"
    return (
        f"the {kind} '{shadow.scope_name}' binds the name '{binding}' (line {line}), which the "
        f"generated code would read instead of the runtime module"
    )


def _check_overlaps(
    plan: FilePlan,
    line_of: Callable[[cst.CSTNode], int],
    end_line_of: Callable[[cst.CSTNode], int],
    outcomes: _Outcomes,
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
                    outcomes.of(b.entry).error(
                        b.entry.pos,
                        f"{_label(b.entry)} (lines {b_lines}) partially overlaps "
                        f"{_label(a.entry)} (lines {a_lines}) declared at {a.entry.pos.ref(b.entry.pos)}",
                    )


def _label(entry: Span | Hook) -> str:
    return f"span '{entry.name}'" if isinstance(entry, Span) else f"hook in {entry.function}"
