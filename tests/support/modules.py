"""Importing generated code from where a test wrote it, without putting that place on ``sys.path``.

A generated tree (a fixture fork, a rendered runtime package) is imported through a package
module for its top-level name whose ``__path__`` is the tree's directory: its submodules then
resolve there and nowhere else. A subprocess gets the tree through ``PYTHONPATH`` instead.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType


def forget(top: str) -> None:
    """Drop the package ``top`` and every module under it from ``sys.modules``."""
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


def mount(root: Path, top: str) -> ModuleType:
    """The package ``top`` as ``root / top`` holds it, made the one in ``sys.modules``: its
    ``__init__.py`` run where there is one, else a namespace package over that directory."""
    directory = root / top
    init = directory / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(top, init, submodule_search_locations=[str(directory)])
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[top] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            del sys.modules[top]
            raise
        return package
    spec = importlib.machinery.ModuleSpec(top, None, is_package=True)
    spec.submodule_search_locations = [str(directory)]
    package = importlib.util.module_from_spec(spec)
    sys.modules[top] = package
    return package


def import_fresh(
    root: Path, name: str = "megatron.demo", runtime: str = "megatron.otel"
) -> tuple[ModuleType, ModuleType | None]:
    """``name`` imported anew from the tree at ``root`` (every module of its top-level package
    forgotten first), and ``runtime`` if that import loaded it."""
    top = name.split(".")[0]
    forget(top)
    mount(root, top)
    module = importlib.import_module(name)
    return module, sys.modules.get(runtime)


def load_file(path: Path, name: str | None = None) -> ModuleType:
    """The single module file ``path``, loaded as ``name`` (its stem by default) and not
    registered in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_pythonpath(*directories: Path | str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (this process's environment by default) with ``directories`` ahead of its
    ``PYTHONPATH``: how a subprocess imports from a tree a test wrote."""
    environ = dict(os.environ if env is None else env)
    paths = [str(d) for d in directories]
    if environ.get("PYTHONPATH"):
        paths.append(environ["PYTHONPATH"])
    environ["PYTHONPATH"] = os.pathsep.join(paths)
    return environ
