"""Megatron-LM main instrumented by the specs: "the replaced tree" of issue 25, the snapshot with
#6438 in replace mode (its hand-written instrumentation stripped, then the specs applied; #6415's
base layer, ``megatron/core/telemetry/``, stays).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.megatron_cpu.pretrain_harness import MODEL_ARGV, Config

REPO = Path(__file__).resolve().parents[2]
# Main's training code uses typing.override (Python 3.12); on 3.11 the test processes give it the
# identity decorator before megatron is imported (sitecustomize below). Never in generated code.
SITECUSTOMIZE = """\
import typing
typing.override = getattr(typing, "override", lambda f: f)
"""


def instrument(source: Path, dest: Path, replace: bool = False, runtime: str = "vendored") -> Path:
    """The specs applied to ``source``, written to ``dest`` (a complete tree); ``dest``. With
    ``replace``, the hand-written instrumentation of #6438 is stripped first (replace mode);
    ``runtime="dependency"``: the import shim in place of the runtime (dependency mode)."""
    from codegen.atomic import write_tree
    from codegen.pipeline import generate

    generation = generate(REPO / "specs", source=source, replace_upstream=replace, runtime=runtime)
    write_tree(dest, {path: new for path, (_old, new) in generation.changes.items()}, base=source)
    return dest


def shims(dest: Path) -> Path:
    """A directory with the test processes' ``sitecustomize`` (put it on ``PYTHONPATH``)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return dest


def environment(root: Path, shim_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_", "NEMO_LENS_"))}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "SLURM_JOB_ID"):
        env.pop(key, None)
    env.update(PYTHONPATH=f"{root}{os.pathsep}{shim_dir}", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env.update(extra or {})
    return env


def run_python(
    root: Path, shim_dir: Path, code: str, extra: dict[str, str] | None = None, timeout: int = 300
):
    """``code`` in a fresh interpreter with ``root`` importable as ``megatron``."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=environment(root, shim_dir, extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- main's pretrain configurations (test_main_pretrain.py, test_main_installed.py) -------------

TRAIN_ITERS = 4
SAVE_INTERVAL = 2
MAIN_ARGV = (
    *MODEL_ARGV, "--train-iters", str(TRAIN_ITERS), "--save-interval", str(SAVE_INTERVAL),
    "--eval-interval", str(SAVE_INTERVAL), "--num-workers", "0",
)  # fmt: skip
RAISE_AT = 1  # the exception run: forward_step raises in iteration 1 (0-based)
KILL_AT = 1  # the SIGTERM run (no handler of Megatron's): killed in iteration 1


def main_configs(main: Path, with_6438: Path, lens: Path, shims: Path) -> dict[str, Config]:
    """The configurations of main's pretrain runs: #6438's hand-written instrumentation (``hand``),
    the replaced tree (``generated``), an exception, SIGTERM, and two runs in one process."""
    ours = (("PYTHONPATH", f"{main}{os.pathsep}{shims}"),)  # shims: the runtime wheel when installed
    return {
        "hand": Config(
            "all", MAIN_ARGV, save=True, env=(("PYTHONPATH", f"{with_6438}{os.pathsep}{lens}"),),
            worker_args=("--hand-written",),
        ),
        "generated": Config("all", MAIN_ARGV, save=True, env=ours),
        "raised": Config("all", MAIN_ARGV, env=ours, worker_args=("--raise-at", str(RAISE_AT)), expect_rc=1),
        "killed": Config(
            "all", MAIN_ARGV, env=(*ours, ("MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S", "5")),
            sigterm_at=KILL_AT, expect_rc=-15,
        ),
        "repeated": Config("all", MAIN_ARGV, env=ours, worker_args=("--repeat", "2")),
    }  # fmt: skip
