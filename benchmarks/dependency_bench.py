"""The rows of a dependency-mode tree (issue 32): a disabled span with the import shim's no-ops
(``megatron-otel-runtime`` absent) and with the package installed, each against an uninstrumented
call, measured in one run by ``dependency_worker.py`` (one interpreter per arm). Where valgrind is
at hand the goals are read from instructions per call (callgrind: the same to a fraction of an
instruction from run to run, where the timed medians move by ~0.06x); the timed rows stay, as
information."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from benchmarks import timing

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


INSTRUCTION_CALLS = 20000


def run(tmp: Path, rounds: int, instructions: bool = False) -> dict:
    """The timed results of both arms; with ``instructions`` also ``"instructions"``: each
    variant's instructions per call (``count_instructions``)."""
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
    if instructions:
        try:
            results["instructions"] = count_instructions(tree, site)
        except (RuntimeError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as exc:
            results["instructions"] = {"error": str(exc)[:1500]}  # the timed rows keep the goals
    return results


def count_instructions(tree: Path, site: Path, calls: int = INSTRUCTION_CALLS) -> dict[str, float]:
    """Instructions per call of both arms' variants (callgrind, ``dependency_worker.py
    --instructions``)."""
    counts: dict[str, float] = {}
    for extra in ([], ["--runtime", str(site)]):
        command = [sys.executable, str(WORKER), "--tree", str(tree), "--instructions", str(calls), *extra]
        counts.update(timing.callgrind_per_call(command, calls))
    return counts


ROWS = (  # label, the span's variant, the uninstrumented one, the goal
    ("function span, package absent (shim's no-ops) / uninstrumented", "shim.function.group_off", "shim.base", ("<=", 1.5)),
    ("function span, package installed, group disabled / uninstrumented", "package.function.group_off", "package.base", ("<=", 1.5)),
    ("statement span, package absent (shim's no-ops) / uninstrumented", "shim.statement.group_off", "shim.base", None),
)  # fmt: skip


def rows(results: dict, ratio_row, instruction_row) -> list:
    """The timed rows (their goals where no instruction counts were taken), then the counted ones."""
    python = results.get("python", "?")
    s = f"dependency mode (import shim), empty function, Python {python}"
    counts = results.get("instructions")
    if counts and "error" in counts:
        counts = None
    out = [ratio_row(s, label, results, num, den, None if counts else goal) for label, num, den, goal in ROWS]
    if counts:
        s = f"dependency mode (import shim), empty function, Python {python}, instructions (callgrind)"
        out += [instruction_row(s, f"{label} (instructions per call)", counts[num], counts[den], goal)
                for label, num, den, goal in ROWS if goal]  # fmt: skip
    return out
