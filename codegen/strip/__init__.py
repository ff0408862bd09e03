"""The strip layer: instrumentation taken out of the tree's files before resolve plans them.

Two kinds come out, each recognised by its structure: this generator's own constructs (``ours``:
an instrumented tree, a fork or an in-place checkout, is instrumented afresh) and Megatron-LM's
hand-written instrumentation of PR #6438 (``upstream``, with ``--replace-upstream``). The pipeline
runs ``strip_sources`` into the overlay that resolve plans from, so resolve only plans; the
tree's files are parsed here first, through ``hostile`` (files libcst would crash on refused), and
``equivalence`` is the codemod's proof obligation (removing the instrumentation gives the
pristine program)."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

import libcst as cst

from codegen.runtime_calls import hook_calls
from codegen.spec.model import Hook, Project
from codegen.strip.hostile import parse_module
from codegen.strip.ours import hook_codes, strip

__all__ = ["maybe_instrumented", "strip_all", "strip_generated", "strip_sources"]


def strip_sources(
    project: Project, root: Path, replaced: Mapping[str, str] | None = None
) -> dict[str, cst.Module]:
    """The files the entries of ``project`` name, as resolve is to plan them, where that differs
    from their text: ``replaced`` (upstream's instrumentation already stripped) and every file
    that may hold this generator's constructs, without them (the runtime import kept, which the
    instrumentation then finds in place). A file that cannot be read or parsed is left out: resolve
    reports it, located, for each entry in it."""
    hooks: dict[str, list[Hook]] = {}
    for entry in project.entries():
        hooks.setdefault(entry.file, [])
        if isinstance(entry, Hook):
            hooks[entry.file].append(entry)
    alias, parent = project.runtime.alias, project.runtime.parent_module
    replaced = replaced or {}
    out: dict[str, cst.Module] = {}
    root = root.resolve()
    for rel, file_hooks in sorted(hooks.items()):
        path = (root / rel).resolve()
        try:  # resolve refuses a file outside the tree or not UTF-8, with a located error
            source = (
                path.read_bytes().decode("utf-8") if path.is_relative_to(root) and path.is_file() else None
            )
        except (OSError, UnicodeDecodeError):
            continue
        ours = source is not None and maybe_instrumented(source, alias, file_hooks)
        if rel not in replaced and not ours:
            continue
        try:
            module = parse_module(replaced.get(rel, source or ""))
        except cst.ParserSyntaxError:
            continue  # resolve parses it again and reports why it cannot be instrumented
        out[rel] = strip(module, alias, parent, hook_codes(file_hooks, alias)) if ours else module
    return out


def maybe_instrumented(source: str, alias: str, hooks: list[Hook]) -> bool:
    """Whether ``source`` may hold our constructs: it names the runtime (``_otel``, or ``otel`` as
    releases before the private name imported it), or it holds the text of a hook that calls
    something else (its longest string literal, else its callee)."""
    if re.search(rf"(?<![\w.])_?{re.escape(alias)}\b", source):
        return True
    for hook in hooks:
        for code in hook_calls(hook, alias):
            if code.startswith(f"{alias}."):
                continue
            tree = ast.parse(code, mode="eval")
            strings = [
                n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
            callee = ast.unparse(tree.body.func) if isinstance(tree.body, ast.Call) else code
            if max(strings, key=len, default=callee) in source:
                return True
    return False


def strip_generated(text: str, alias: str, parent: str, hooks: list[Hook]) -> str:
    """``text`` (generated) as the pipeline strips it when it plans the file (the import kept)."""
    return strip(cst.parse_module(text), alias, parent, hook_codes(hooks, alias)).code


def strip_all(text: str, alias: str, parent: str) -> str:
    """``text`` without any of this generator's constructs, the runtime import included
    (cst.ParserSyntaxError when it does not parse)."""
    return strip(cst.parse_module(text), alias, parent, imports=True).code
