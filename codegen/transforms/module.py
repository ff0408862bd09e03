"""Apply every construct planned for one file and add the single runtime import."""

from __future__ import annotations

import bisect

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from codegen.resolve.plan import FilePlan
from codegen.spec.model import Project
from codegen.transforms.span import SpanTransformer


def transform_file(project: Project, plan: FilePlan) -> str:
    """The new source of ``plan.path``; the original text when nothing is left to do."""
    if not plan.wraps:
        return plan.source
    module = plan.module.visit(SpanTransformer(project, plan.wraps, plan.module.default_indent))
    module = add_runtime_import(project, module)
    return module.code


def add_runtime_import(project: Project, module: cst.Module) -> cst.Module:
    """``from megatron.core import otel``: merged into an existing ``from megatron.core import``
    by libcst's import visitor, or placed where isort would put a new statement."""
    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, project.runtime.parent_module, project.runtime.alias)
    before = len(module.body)
    module = AddImportsVisitor(context).transform_module(module)
    if len(module.body) > before:
        module = _blank_lines_after_imports(_place_new_import(project, module))
    return _sort_merged_names(project, module)


def _module_name(stmt: cst.BaseStatement) -> str | None:
    """The absolute module a top-level import line imports from, or None."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    node = stmt.body[0]
    if isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None:
        return cst.Module([]).code_for_node(node.module)
    if isinstance(node, cst.Import):
        return cst.Module([]).code_for_node(node.names[0].name)
    return None


def _place_new_import(project: Project, module: cst.Module) -> cst.Module:
    """Move the statement libcst appended after the last import to its isort position: sorted
    among the imports of the same top-level package, or as a new section after the others."""
    body = list(module.body)
    target = project.runtime.parent_module
    new_index = next(i for i, s in enumerate(body) if _module_name(s) == target and _imports_alias(s, project))
    new_stmt = body.pop(new_index)
    top = target.split(".")[0]
    imports = [(i, name) for i, s in enumerate(body) if (name := _module_name(s)) is not None]
    if not imports:
        body.insert(new_index, new_stmt)
        return module.with_changes(body=body)
    same = [(i, name) for i, name in imports if name.split(".")[0] == top]
    if same:
        after = [i for i, name in same if name.lower() > target.lower()]
        if after:
            index = after[0]
            new_stmt = new_stmt.with_changes(leading_lines=body[index].leading_lines)
            body[index] = body[index].with_changes(leading_lines=())
        else:
            index = same[-1][0] + 1
            new_stmt = new_stmt.with_changes(leading_lines=())
    else:
        index = imports[-1][0] + 1
        new_stmt = new_stmt.with_changes(leading_lines=(cst.EmptyLine(),))
    body.insert(index, new_stmt)
    return module.with_changes(body=body)


def _imports_alias(stmt: cst.BaseStatement, project: Project) -> bool:
    assert isinstance(stmt, cst.SimpleStatementLine)
    node = stmt.body[0]
    return isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar) and any(
        a.name.value == project.runtime.alias for a in node.names  # type: ignore[union-attr]
    )


def _sort_merged_names(project: Project, module: cst.Module) -> cst.Module:
    """Move the alias merged into ``from X import a, b`` to its alphabetical (isort) position."""
    alias = project.runtime.alias

    class _Sorter(cst.CSTTransformer):
        def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
            if updated_node.module is None or isinstance(updated_node.names, cst.ImportStar):
                return updated_node
            if cst.Module([]).code_for_node(updated_node.module) != project.runtime.parent_module:
                return updated_node
            names = [n for n in updated_node.names if not m.matches(n, m.ImportAlias(name=m.Name(alias), asname=None))]
            if len(names) == len(updated_node.names) or not names:
                return updated_node
            keys = [cst.Module([]).code_for_node(n.name).lower() for n in names]
            index = bisect.bisect_left(keys, alias.lower())
            ordered = names[:index] + [cst.ImportAlias(name=cst.Name(alias))] + names[index:]
            commas = [n.comma for n in updated_node.names]
            return updated_node.with_changes(names=[n.with_changes(comma=c) for n, c in zip(ordered, commas)])

    return module.visit(_Sorter())


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
