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


def load_finder(unpacked: Path, package: str) -> Any:
    """The ``_finder`` module of the wheel unpacked at ``unpacked``, its package loaded as
    ``package`` (the wheel's modules beside it: the finder imports ``_package_info``; the finder
    not installed on sys.meta_path)."""
    import importlib
    import importlib.util
    import sys

    for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")]:
        del sys.modules[name]  # another wheel's, loaded under this name earlier in this worker
    where = unpacked / MODULE
    spec = importlib.util.spec_from_file_location(
        package, where / "__init__.py", submodule_search_locations=[str(where)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    spec.loader.exec_module(module)
    return importlib.import_module(f"{package}._finder")


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


def install_wheel(wheel: Path, target: Path) -> Path:
    """``wheel`` pip-installed from its file into ``target`` (no index, no dependencies: the test
    environment's are used); ``target``."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target"]
    subprocess.run([*command, str(target), str(wheel)], check=True, capture_output=True)
    return target
