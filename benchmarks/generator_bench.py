"""Generator speed: ``codegen apply`` against the floor of parsing and re-rendering with libcst."""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

FLOOR_SCRIPT = """\
import sys, libcst
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        libcst.parse_module(f.read()).code
"""


@dataclass
class GeneratorResult:
    files: list[str] = field(default_factory=list)
    generate_s: list[float] = field(default_factory=list)  # in-process generate() + generated_tree()
    floor_s: list[float] = field(default_factory=list)  # in-process parse + render of the touched files
    # end to end, the least of interleaved rounds:
    cli_floor_s: float | None = None  # python -c 'import libcst; parse + render'
    cli_apply_s: float | None = None  # codegen apply SPECS --no-cache --generated TMP
    cli_check_s: float | None = None  # the same again with --check: an unchanged second run
    cli_check_rc: int | None = None
    # the same in CPU seconds (user + system): on a shared machine, the wall times above include
    # the waits for a core; CPU time is what the run itself costs
    generate_cpu_s: list[float] = field(default_factory=list)
    floor_cpu_s: list[float] = field(default_factory=list)
    cli_floor_cpu_s: float | None = None
    cli_apply_cpu_s: float | None = None
    cli_check_cpu_s: float | None = None
    notes: list[str] = field(default_factory=list)


def spec_files(spec_dir: Path) -> list[str]:
    """The source files the specs touch, read from the YAML (not from the generator's plan)."""
    files: set[str] = set()
    for path in sorted(spec_dir.glob("*.y*ml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        default = data.get("file")
        for span in data.get("spans") or ():
            file = span.get("file", default)
            if file:
                files.add(file)
    return sorted(files)


def floor(root: Path, files: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds to parse and render ``files``."""
    import libcst

    start, cpu = time.perf_counter(), time.process_time()
    for file in files:
        libcst.parse_module((root / file).read_text(encoding="utf-8")).code  # noqa: B018 - rendering is timed
    return time.perf_counter() - start, time.process_time() - cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(command: list[str], cwd: Path) -> tuple[float, float, int, str]:
    """Wall and CPU seconds of a subprocess, its exit status and output."""
    start, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    wall = time.perf_counter() - start
    return wall, _children_cpu() - cpu, proc.returncode, (proc.stderr or proc.stdout).strip()


def _least(known: float | None, value: float) -> float:
    return value if known is None else min(known, value)


def run(
    spec_dir: Path,
    repo: Path,
    generate_runs: int = 2,
    floor_runs: int = 3,
    cli: bool = True,
    cli_rounds: int = 3,
) -> GeneratorResult:
    from codegen.pipeline import generate

    result = GeneratorResult(files=spec_files(spec_dir))
    # Interleaved: generate, floor, generate, floor, ... (the first generate also finds the tree).
    root: Path | None = None
    for i in range(max(generate_runs, floor_runs)):
        if i < generate_runs:
            start, cpu = time.perf_counter(), time.process_time()
            generation = generate(spec_dir)
            generation.generated_tree()
            result.generate_s.append(time.perf_counter() - start)
            result.generate_cpu_s.append(time.process_time() - cpu)
            if root is None:
                root = generation.source_root
                planned = sorted(generation.plan.files)
                if planned != result.files:
                    # hooks and flags touch files no span names (arguments.py): the floor parses
                    # and renders every file the generator does
                    result.notes.append(
                        f"floor covers the {len(planned)} planned files: {', '.join(planned)}"
                    )
                    result.files = planned
        if i < floor_runs and root is not None:
            wall, cpu = floor(root, result.files)
            result.floor_s.append(wall)
            result.floor_cpu_s.append(cpu)
    if not cli or root is None:
        return result

    codegen = Path(sys.executable).with_name("codegen")
    base = [str(codegen)] if codegen.exists() else [sys.executable, "-m", "codegen.cli"]
    floor_command = [sys.executable, "-c", FLOOR_SCRIPT, *(str(root / f) for f in result.files)]
    with tempfile.TemporaryDirectory(prefix="codegen-bench-") as tmp:
        # Write into a temporary generated/ so the committed one is never touched.
        # --no-cache: a real run (it neither reads nor stores the result cache).
        apply_command = [*base, "apply", str(spec_dir), "--no-cache", "--generated", tmp]
        # Interleaved rounds, the minimum of each kept: one subprocess pair is at the mercy of
        # whatever else the machine does during its few seconds.
        for _ in range(cli_rounds):
            wall, cpu, rc, out = _timed(floor_command, repo)
            if rc != 0:
                result.notes.append(f"floor subprocess failed ({rc}): {out[-300:]}")
            result.cli_floor_s = _least(result.cli_floor_s, wall)
            result.cli_floor_cpu_s = _least(result.cli_floor_cpu_s, cpu)
            wall, cpu, rc, out = _timed(apply_command, repo)
            if rc != 0:
                result.notes.append(f"codegen apply exited {rc}: {out[-300:]}")
            result.cli_apply_s = _least(result.cli_apply_s, wall)
            result.cli_apply_cpu_s = _least(result.cli_apply_cpu_s, cpu)
        # untimed: a run that stores its result (or finds it stored), which --check below reuses
        _timed([*base, "apply", str(spec_dir), "--generated", tmp], repo)
        result.cli_check_s, result.cli_check_cpu_s, result.cli_check_rc, out = _timed(
            [*base, "apply", str(spec_dir), "--check", "--generated", tmp], repo
        )
        if result.cli_check_rc != 0:
            result.notes.append(f"codegen apply --check exited {result.cli_check_rc}: {out[-300:]}")
    return result
