"""What the test workers give Python 3.11 so that code written for newer Pythons runs (tests only).

- ``typing.override`` (3.12): Megatron-LM main's training code decorates methods with it; the
  identity decorator here (``main_tree.SITECUSTOMIZE`` does the same for every test process).
- nemo-lens 0.1.0 (declares Python >= 3.13) has one newer construct: a ``type X = ...`` alias
  statement (3.12 syntax) in ``nemo/lens/strategies.py``. That module is compiled with the
  statement as a plain assignment; every other nemo-lens module is imported unchanged.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
import typing

TYPE_ALIAS = re.compile(rb"(?m)^type (\w+) = ")
REWRITTEN = frozenset({"nemo.lens.strategies"})


class _AliasLoader(importlib.machinery.SourceFileLoader):
    def source_to_code(self, data, path, *, _optimize=-1):  # type: ignore[override]
        return compile(TYPE_ALIAS.sub(rb"\1 = ", data), path, "exec", dont_inherit=True, optimize=_optimize)


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in REWRITTEN:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _AliasLoader(spec.loader.name, spec.loader.path)
        return spec


def install() -> None:
    typing.override = getattr(typing, "override", lambda f: f)  # type: ignore[attr-defined]
    if sys.version_info < (3, 12) and not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
