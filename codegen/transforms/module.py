"""Apply every construct planned for one file and add the single runtime import."""

from __future__ import annotations

import libcst as cst
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
    """``from megatron.core import otel``, merged and placed by libcst's import visitor."""
    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, project.runtime.parent_module, project.runtime.alias)
    module = AddImportsVisitor(context).transform_module(module)
    return _sort_merged_names(project, module)


def _sort_merged_names(project: Project, module: cst.Module) -> cst.Module:
    """Keep ``from X import a, b`` alphabetical (isort) when the alias was merged into it."""

    class _Sorter(cst.CSTTransformer):
        def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
            if updated_node.module is None or isinstance(updated_node.names, cst.ImportStar):
                return updated_node
            if cst.Module([]).code_for_node(updated_node.module) != project.runtime.parent_module:
                return updated_node
            names = list(updated_node.names)
            if len(names) < 2 or names[-1].name.value != project.runtime.alias:  # type: ignore[union-attr]
                return updated_node
            ordered = sorted(names, key=lambda a: cst.Module([]).code_for_node(a.name).lower())
            commas = [n.comma for n in names]
            return updated_node.with_changes(
                names=[n.with_changes(comma=c) for n, c in zip(ordered, commas)]
            )

    return module.visit(_Sorter())
