"""The functions of a module that may run while the interpreter clears the modules at exit.

A module still alive at the final clearing has its names set to None (those starting with an
underscore first, the runtime's ``_otel`` among them) before the objects they held are released,
so a ``__del__`` can run with the runtime's name gone, and so can whatever it calls. Code inserted
there guards on the name itself first (``_otel and _otel.STEP and ...``), so that the user's body
runs as the pristine one does.

Found by name, within the module: every ``__del__``, and every function named by a call the
found functions make, as ``name(...)`` or ``anything.name(...)`` (``self.close()``,
``type(self).close(self)``, ``self._file.close()`` alike: a guard too many costs one name read), to a
fixed point. A function of another module that a ``__del__`` calls is not seen (its own module's
clearing is what matters there, and nothing in this module says it happens at exit).
"""

from __future__ import annotations

from collections import defaultdict

import libcst as cst

FINALIZER = "__del__"


class _Functions(cst.CSTVisitor):
    """Every function of the module by name (methods and nested functions included), and the
    names each one calls."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[cst.FunctionDef]] = defaultdict(list)
        self.calls: dict[int, set[str]] = defaultdict(set)
        self._stack: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.by_name[node.name.value].append(node)
        self._stack.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._stack.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if not self._stack:
            return
        func = node.func
        if isinstance(func, cst.Name):
            self.calls[id(self._stack[-1])].add(func.value)
        elif isinstance(func, cst.Attribute):
            self.calls[id(self._stack[-1])].add(func.attr.value)


def at_exit_functions(module: cst.Module) -> set[int]:
    """Ids of the module's functions that a ``__del__`` is, or may call (see the module's doc)."""
    functions = _Functions()
    module.visit(functions)
    found: set[int] = set()
    pending = list(functions.by_name.get(FINALIZER, ()))
    while pending:
        function = pending.pop()
        if id(function) in found:
            continue
        found.add(id(function))
        for name in functions.calls.get(id(function), ()):
            pending.extend(functions.by_name.get(name, ()))
    return found
