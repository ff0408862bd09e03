"""The instrumentation wheel ``codegen package`` builds, as the tests look into it: its table of
releases and its ``_finder`` module loaded from the unpacked wheel (tests/target/test_package.py,
test_main_package.py; the wheel itself is a fixture of tests/target/conftest.py)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

RELEASES = ("0.17.1", "0.18.2", "0.19.0", "0.19.2")
MODULE = "megatron_otel_instrumentation"


def load_finder(unpacked: Path, name: str) -> Any:
    """The ``_finder`` module of the wheel unpacked at ``unpacked``, loaded as ``name`` (not
    installed on sys.meta_path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, unpacked / MODULE / "_finder.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_table(unpacked: Path) -> dict[str, Any]:
    return json.loads((unpacked / MODULE / "_table.json").read_text())


def module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def find_spec_in(finder: Any, root: Path, path: str) -> Any:
    name = module_name(path)
    return finder.find_spec(name, [str(root / Path(path).parent)])


def build_wheel(out: Path, *options: str) -> Path:
    """The wheel ``codegen package specs/ --out OUT OPTIONS...`` builds."""
    from codegen.cli import main
    from tests.support.paths import SPECS

    assert main(["package", str(SPECS), "--out", str(out), *options]) == 0
    (built,) = out.glob("*.whl")
    return built


def unpack(wheel: Path, root: Path) -> Path:
    """``wheel`` unzipped into ``root`` (as pip lays it into site-packages); ``root``."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(root)
    return root
