"""Apply every construct planned for one file and add the single runtime import."""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

from codegen.layout import code_of
from codegen.resolve.sites import FilePlan
from codegen.resolve.statements import child_blocks, is_docstring
from codegen.runtime_calls import hook_calls, names_runtime, payload_call
from codegen.spec.model import Project, Span
from codegen.transforms.blocks import BlockEditor


def transform_file(project: Project, plan: FilePlan) -> str:
    """The new source of ``plan.path`` (its module is pristine: an instrumented one was stripped
    when planning)."""
    bom = "\ufeff" if plan.source.startswith("\ufeff") else ""  # libcst drops a byte order mark
    if not (plan.wraps or plan.inserts or plan.decorations or plan.rewrites):
        return bom + plan.module.code
    first_use = _first_use(project, plan)
    module = plan.module.visit(BlockEditor(project, plan, _frozen(plan)))
    if first_use is not None:  # a file whose edits never name the runtime gets no import (F401)
        module = add_runtime_import(project, module, first_use)
    return bom + module.code


_FMT_OFF = re.compile(r"[ \t]*# fmt: off[ \t]*$")
_FMT_ON = re.compile(r"[ \t]*# fmt: on[ \t]*$")


def _frozen(plan: FilePlan) -> frozenset[int]:
    """Statements of the edited blocks that black leaves alone: any of their lines between
    ``# fmt: off`` and ``# fmt: on`` (or the end of the file), or ending in ``# fmt: skip``.
    They move with their block but are never laid out again."""
    if "fmt: off" not in plan.source and "fmt: skip" not in plan.source:
        return frozenset()
    lines: set[int] = set()
    off = False
    text = plan.module.code  # not plan.source: an instrumented source was stripped when planning
    for number, line in enumerate(text.splitlines(), start=1):
        if _FMT_OFF.match(line):
            off = True
        elif _FMT_ON.match(line):
            off = False
        if off or line.rstrip().endswith("# fmt: skip"):
            lines.add(number)
    positions = plan.context.positions()  # the file's one position pass (shared with resolution)
    blocks = [w.block for w in plan.wraps] + [r.block for r in plan.rewrites]
    frozen = set()
    for block in blocks:
        for stmt in block.body:
            where = positions[stmt]
            if any(n in lines for n in range(where.start.line, where.end.line + 1)):
                frozen.add(id(stmt))
    return frozenset(frozen)


def _first_use(project: Project, plan: FilePlan) -> int | None:
    """Index of the first top-level statement whose generated code names the runtime: the
    import must come before it (a decorator under ``if HAVE_X:`` runs at import time)."""
    name = project.runtime.alias
    users = {id(func) for span, func in plan.decorations}
    for wrap in plan.wraps:
        entry = wrap.entry
        if (
            isinstance(entry, Span)
            or entry.guard
            or any(names_runtime(c, name) for c in hook_calls(entry, name))
        ):
            users.add(id(wrap.function))
    for insert in plan.inserts:
        if insert.hook.guard or names_runtime(payload_call(insert.hook.payload, name), name):
            users.add(id(insert.function))
    users.update(id(r.function) for r in plan.rewrites if names_runtime(r.hook.wrapper, name))
    if not users:
        return None
    return next(i for i, stmt in enumerate(plan.module.body) if _defines(stmt, users))


def _defines(stmt: cst.BaseStatement, functions: set[int]) -> bool:
    """Whether one of ``functions`` is ``stmt`` or defined (at any depth) inside it."""
    stack: list[cst.CSTNode] = [stmt]
    while stack:
        current = stack.pop()
        if id(current) in functions:
            return True
        if isinstance(current, cst.BaseCompoundStatement):
            for block in child_blocks(current):
                stack.extend(getattr(block, "body", ()))
    return False


def add_runtime_import(project: Project, module: cst.Module, first_use: int | None = None) -> cst.Module:
    """``import megatron.core.otel as _otel`` where isort would put it, before ``body[first_use]``
    (nothing when the module has it already).

    The runtime is imported under a private name: a module without ``__all__`` exports every
    public name to ``from module import *``, and ``otel`` would overwrite the importer's own. As
    ``import X as Y`` the line is one isort keeps whole among the ``import`` lines of its section
    (``from megatron.core import otel as _otel`` would split a neighbouring ``from megatron.core
    import a, z`` around it).

    libcst's AddImportsVisitor does the same but resolves scope and qualified-name metadata for
    the whole module first: measured, 3.4 s of a 5 s run on megatron-core. Imports are top-level
    statements, so editing ``module.body`` directly is enough.
    """
    runtime = project.runtime
    body = list(module.body)
    limit = _first_definition(body) if first_use is None else min(first_use, _first_definition(body))
    for stmt in body[:limit]:
        node = _only_small(stmt)
        if isinstance(node, cst.Import) and any(
            code_of(a.name) == runtime.module
            and isinstance(a.asname, cst.AsName)
            and code_of(a.asname.name) == runtime.binding
            for a in node.names
        ):
            return module
    new = cst.parse_statement(runtime.import_statement + "\n")
    return _blank_lines_after_imports(_place_new_import(project, module, new, limit))


def _only_small(stmt: cst.BaseStatement) -> cst.BaseSmallStatement | None:
    """The one small statement of a simple statement line, or None."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def _module_name(stmt: cst.BaseStatement) -> str | None:
    """The absolute module a top-level import line imports from, or None."""
    node = _only_small(stmt)
    if isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None:
        return code_of(node.module)
    if isinstance(node, cst.Import):
        return code_of(node.names[0].name)
    return None


def _place_new_import(
    project: Project,
    module: cst.Module,
    new_stmt: cst.SimpleStatementLine | cst.BaseCompoundStatement,
    limit: int,
) -> cst.Module:
    """Insert the new ``import`` line where isort puts it: sorted among the ``import`` lines of the
    same top-level package, before its ``from`` lines, else as a new section after the other
    absolute imports."""
    body = list(module.body)
    target = project.runtime.module
    top = target.split(".")[0]
    # beside a ``from megatron.core import ...`` wherever above ``limit`` it is (training.py imports
    # its packages only after timing its start); else among the leading imports: a late import
    # below a function would come after its decorators, and one below other module-level code
    # would be a flake8 E402 finding
    header = body[: min(limit, _first_code(body))]
    imports = [(i, name) for i, s in enumerate(header) if (name := _module_name(s)) is not None]
    same = _parent_block(body[:limit], project.runtime.parent_module) or [
        (i, name) for i, name in imports if name.split(".")[0] == top
    ]
    if not same and not imports:
        index = _after_header(body)
        if index:
            new_stmt = new_stmt.with_changes(leading_lines=(cst.EmptyLine(),))
        body.insert(index, new_stmt)
        return module.with_changes(body=body)
    if same:
        # isort (black profile) puts a section's `import x` lines, sorted, before its `from` lines
        after = [i for i, name in same if _is_from(body[i]) or name.lower() > target.lower()]
        if after:
            index = after[0]
            new_stmt = new_stmt.with_changes(leading_lines=body[index].leading_lines)
            body[index] = body[index].with_changes(leading_lines=())
        else:
            index = same[-1][0] + 1
    else:
        index = imports[-1][0] + 1
        new_stmt = new_stmt.with_changes(leading_lines=(cst.EmptyLine(),))
    if index > _first_code(body) and isinstance(new_stmt, cst.SimpleStatementLine):
        # among imports that follow module code (training.py's, after it times its start): the
        # neighbours are flake8 E402 findings already; ours says it is deliberate
        new_stmt = new_stmt.with_changes(
            trailing_whitespace=cst.TrailingWhitespace(
                whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment("# noqa: E402")
            )
        )
    body.insert(index, new_stmt)
    return module.with_changes(body=body)


def _parent_block(body: Sequence[cst.BaseStatement], parent: str) -> list[tuple[int, str]]:
    """The first run of consecutive import lines holding a ``from PARENT import ...``, as
    (index, module) of its imports of PARENT's top-level package; [] when there is none."""
    top = parent.split(".")[0]
    runs: list[list[tuple[int, str]]] = []
    previous = -2
    for index, stmt in enumerate(body):
        name = _module_name(stmt)
        if name is None:
            continue
        if index != previous + 1:
            runs.append([])
        previous = index
        runs[-1].append((index, name))
    for run in runs:
        if any(name == parent and _is_from(body[i]) for i, name in run):
            return [(i, name) for i, name in run if name.split(".")[0] == top]
    return []


def _first_definition(body: Sequence[cst.BaseStatement]) -> int:
    """Index of the first top-level function or class: the leading import block ends there."""
    return next((i for i, s in enumerate(body) if isinstance(s, (cst.FunctionDef, cst.ClassDef))), len(body))


def _first_code(body: Sequence[cst.BaseStatement]) -> int:
    """Index of the first statement after which a new import would be flake8's E402 (module level
    import not at top of file): pycodestyle allows the docstring, ``__dunder__`` assignments and
    ``if``/``try``/``with`` blocks before imports, and nothing else."""
    for index, stmt in enumerate(body):
        if not (
            isinstance(stmt, (cst.If, cst.Try, cst.With))
            or _module_name(stmt) is not None
            or is_docstring(stmt)
            or _dunder_assignment(stmt)
        ):
            return index
    return len(body)


def _dunder_assignment(stmt: cst.BaseStatement) -> bool:
    """``__name__ = ...``: one plain target, a dunder name."""
    node = _only_small(stmt)
    if not isinstance(node, cst.Assign) or len(node.targets) != 1:
        return False
    target = node.targets[0].target
    return isinstance(target, cst.Name) and target.value.startswith("__") and target.value.endswith("__")


def _future_import(stmt: cst.BaseStatement) -> bool:
    node = _only_small(stmt)
    return (
        isinstance(node, cst.ImportFrom)
        and isinstance(node.module, cst.Name)
        and node.module.value == "__future__"
    )


def _is_from(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.ImportFrom)


def _after_header(body: Sequence[cst.BaseStatement]) -> int:
    """Index after the module docstring and ``from __future__`` imports."""
    index = 0
    if body and is_docstring(body[0]):
        index = 1
    while index < len(body) and _future_import(body[index]):
        index += 1
    return index


def _blank_lines_after_imports(module: cst.Module) -> cst.Module:
    """PEP 8 spacing between the last top-level import and the code after it."""
    body = list(module.body)
    last = max((i for i, s in enumerate(body) if _module_name(s) is not None), default=None)
    if last is None or last + 1 >= len(body):
        return module
    following = body[last + 1]
    wanted = 2 if isinstance(following, (cst.FunctionDef, cst.ClassDef)) else 1
    blank = sum(1 for line in following.leading_lines if line.comment is None)
    if blank >= wanted or any(line.comment is not None for line in following.leading_lines):
        return module
    lines = tuple(cst.EmptyLine() for _ in range(wanted - blank)) + tuple(following.leading_lines)
    body[last + 1] = following.with_changes(leading_lines=lines)
    return module.with_changes(body=body)
