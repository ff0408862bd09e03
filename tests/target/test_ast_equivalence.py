"""The whole 0.19.2 target: every instrumented file is the pristine file once the instrumentation
is removed (Python AST comparison)."""

from __future__ import annotations

from codegen.pipeline import Generation
from codegen.strip.equivalence import ast_dump, deinstrumented_ast, equivalent
from codegen.strip.ours import hook_codes


def test_every_instrumented_file_is_pristine_once_deinstrumented(generation: Generation) -> None:
    runtime = generation.project.runtime
    checked = []
    for path, (old, new) in generation.changes.items():
        if old is None:  # the runtime package itself
            assert path.startswith(runtime.package + "/"), path
            continue
        hooks = [h for h in generation.project.hooks if h.file == path]
        codes = hook_codes(hooks, runtime.alias)
        assert equivalent(old, new, runtime.alias, runtime.parent_module, codes), path
        checked.append(path)
    planned = {
        p for p, f in generation.plan.files.items() if f.wraps or f.inserts or f.decorations or f.rewrites
    }
    assert set(checked) == planned and len(checked) >= 10


def test_the_pristine_files_have_nothing_to_strip(generation: Generation) -> None:
    """The remover removes only the generator's constructs: the pristine files come out whole."""
    runtime = generation.project.runtime
    for path, (old, _) in generation.changes.items():
        if old is not None:
            codes = hook_codes([h for h in generation.project.hooks if h.file == path], runtime.alias)
            assert deinstrumented_ast(old, runtime.alias, runtime.parent_module, codes) == ast_dump(old), path
