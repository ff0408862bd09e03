"""The rows of a dependency-mode tree (issue 32): a disabled span with the import shim's no-ops
(``megatron-otel-runtime`` absent) and with the package installed, each against an uninstrumented
call, measured in one run by ``dependency_worker.py`` (one interpreter per arm)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixture"
WORKER = HERE / "dependency_worker.py"


def build(tmp: Path) -> tuple[Path, Path]:
    """The fixture in dependency mode, and the runtime package its wheel holds (unpacked)."""
    from codegen.diagnostics import Diagnostics
    from codegen.emit.package import write_runtime_wheel
    from codegen.emit.runtime import render_taxonomy, runtime_constant, runtime_sources
    from codegen.pipeline import generate
    from codegen.spec.load import load_project

    generation = generate(FIXTURE / "specs", source=FIXTURE / "src", release="0.19.2", runtime="dependency")
    tree = tmp / "tree"
    shutil.copytree(FIXTURE / "src", tree, ignore=shutil.ignore_patterns("__pycache__"))
    for path, (_, text) in generation.changes.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text, encoding="utf-8")
    project = load_project(FIXTURE / "specs", Diagnostics())
    modules = {**runtime_sources(), "_taxonomy.py": render_taxonomy(project)}
    wheel = write_runtime_wheel(tmp / "dist", modules, runtime_constant("VERSION"))
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as archive:  # a pure-Python wheel: unpacking it is installing it
        archive.extractall(site)
    return tree, site


def run(tmp: Path, rounds: int) -> dict:
    tree, site = build(tmp)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    results: dict = {}
    for extra in ([], ["--runtime", str(site)]):
        command = [sys.executable, str(WORKER), "--tree", str(tree), "--rounds", str(rounds), *extra]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        data = json.loads(proc.stdout)
        results.update(data["results"])
        results["python"] = data["python"]
    return results


def rows(results: dict, ratio_row) -> list:
    s = f"dependency mode (import shim), empty function, Python {results.get('python', '?')}"
    return [
        ratio_row(s, "function span, package absent (shim's no-ops) / uninstrumented", results, "shim.function.group_off", "shim.base", ("<=", 1.5)),
        ratio_row(s, "function span, package installed, group disabled / uninstrumented", results, "package.function.group_off", "package.base", ("<=", 1.5)),
        ratio_row(s, "statement span, package absent (shim's no-ops) / uninstrumented", results, "shim.statement.group_off", "shim.base"),
    ]  # fmt: skip
