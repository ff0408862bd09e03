"""Bind hooks: the statement an insert goes before/after, the call a wrap rewrites."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
from libcst.helpers import get_full_name_for_node

from codegen.diagnostics import Diagnostics
from codegen.resolve.regions import has_docstring, select
from codegen.resolve.sites import Insert, Rewrite
from codegen.resolve.statements import statement_sites
from codegen.resolve.walk import walk
from codegen.spec.model import EntryHook, StatementHook, WrapArgument, WrapHook


def resolve_rewrite(
    hook: WrapHook,
    func: cst.FunctionDef,
    alias: str,
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> Rewrite | None:
    site = select(hook, hook.selector, statement_sites(func), line_of, diags)
    if site is None:
        return None
    calls = [
        c
        for c in walk(site.node)
        if isinstance(c, cst.Call) and get_full_name_for_node(c.func) == hook.selector.value
    ]
    if len(calls) != 1:
        diags.error(
            hook.selector.pos,
            f"line {line_of(site.node)} calls {hook.selector.value} {len(calls)} times; wrap needs one",
        )
        return None
    call = calls[0]
    target = hook.target
    if isinstance(target, WrapArgument) and argument_index(call, target.argument) is None:
        diags.error(
            hook.selector.pos,
            f"the call on line {line_of(site.node)} has no argument {target.argument} (or a *args comes before it)",
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
    for index, arg in enumerate(call.args):
        if arg.star:  # after *args, positions in the source are not positions at run time
            return None
        if arg.keyword is None:
            if argument == 0:
                return index
            argument -= 1
    return None


def resolve_insert(
    hook: EntryHook | StatementHook,
    func: cst.FunctionDef,
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> Insert | None:
    body = func.body
    assert isinstance(body, cst.IndentedBlock)
    if isinstance(hook, EntryHook):
        index = 1 if has_docstring(body) else 0
        return Insert(hook, func, body, index)
    site = select(hook, hook.selector, statement_sites(func), line_of, diags)
    if site is None:
        return None
    block = site.block
    if not isinstance(block, cst.IndentedBlock):
        diags.error(hook.pos, "cannot insert into a one-line block; the block must be indented")
        return None
    index = site.index + (1 if hook.after else 0)
    return Insert(hook, func, block, index)
