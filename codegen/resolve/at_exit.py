"""The functions of a module that may run while the interpreter clears the modules at exit.

A module still alive at the final clearing has its names set to None (those starting with an
underscore first, the runtime's ``_otel`` among them) before the objects they held are released,
so a ``__del__`` can run with the runtime's name gone, and so can whatever it calls. Code inserted
there guards on the name itself first (``_otel and _otel.STEP and ...``), so that the user's body
runs as the pristine one does.

Found by name, among the module's functions as resolution collects them: every ``__del__``, and
every function named by a call the found functions make, as ``name(...)`` or
``anything.name(...)`` (``self.close()``, ``type(self).close(self)``, ``self._file.close()``
alike: a guard too many costs one name read), to a fixed point. A function of another module that
a ``__del__`` calls is not seen (its own module's clearing is what matters there, and nothing in
this module says it happens at exit).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import libcst as cst

from codegen.resolve.walk import walk

FINALIZER = "__del__"


def at_exit_functions(functions: Mapping[str, Sequence[cst.FunctionDef]]) -> frozenset[int]:
    """Ids of the functions (``collect_functions``: dotted qualname -> definitions) that a
    ``__del__`` is, or may call; nothing is walked in a module without a ``__del__``."""
    pending = [f for qualname, defs in functions.items() if _name(qualname) == FINALIZER for f in defs]
    if not pending:
        return frozenset()
    by_name: dict[str, list[cst.FunctionDef]] = defaultdict(list)
    for qualname, defs in functions.items():
        by_name[_name(qualname)].extend(defs)
    found: set[int] = set()
    while pending:
        function = pending.pop()
        if id(function) in found:
            continue
        found.add(id(function))
        # a nested def's calls are its own (followed when it is called); a lambda's are the function's
        for node in walk(function.body, prune=lambda n: isinstance(n, cst.FunctionDef)):
            if isinstance(node, cst.Call):
                called = node.func
                if isinstance(called, cst.Attribute):
                    called = called.attr
                if isinstance(called, cst.Name):
                    pending.extend(by_name.get(called.value, ()))
    return frozenset(found)


def _name(qualname: str) -> str:
    return qualname.rpartition(".")[2]
