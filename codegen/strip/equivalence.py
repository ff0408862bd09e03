"""The proof obligation of the codemod: removing the instrumentation gives the pristine program.

``deinstrumented_ast(new)`` strips every construct of the generator (see :mod:`strip`), the runtime
import included, and dumps Python's own AST of what remains; it must equal the dump of the pristine
source. Layout (re-indentation, black-style re-wrapping) does not show in an AST; any statement
moved, dropped, duplicated or altered does, and so does any leftover reference to the runtime.
"""

from __future__ import annotations

import ast
from collections.abc import Collection

import libcst as cst

from codegen.strip.ours import strip


def ast_dump(source: str) -> str:
    return ast.dump(ast.parse(source.lstrip("\ufeff")))


def deinstrumented_ast(source: str, alias: str, parent: str, hook_codes: Collection[str] = ()) -> str:
    module = cst.parse_module(source.lstrip("\ufeff"))
    return ast_dump(strip(module, alias, parent, hook_codes, imports=True).code)


def equivalent(
    pristine: str, instrumented: str, alias: str, parent: str, hook_codes: Collection[str] = ()
) -> bool:
    """``hook_codes``: the hooks that call something other than the runtime (see ours.py)."""
    return deinstrumented_ast(instrumented, alias, parent, hook_codes) == ast_dump(pristine)
