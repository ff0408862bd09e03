"""Megatron-LM main (the snapshot without #6438, #6415's base layer in it) instrumented by the specs:
"the replaced tree" of issue 25 (replace mode's strip of #6438 is AST-equal to that snapshot).

Until the generator instruments a tree that carries only the base layer (issue 25, item 1), the
refusal is narrowed here to what really emits spans: the base layer's phrase is dropped from
``instrumentation_in``'s findings, nothing else. Once the generator does so itself, the filter
drops nothing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE_LAYER = "megatron/core/telemetry/"
# Main's training code uses typing.override (Python 3.12); on 3.11 the test processes give it the
# identity decorator before megatron is imported (sitecustomize below). Never in generated code.
SITECUSTOMIZE = """\
import typing
typing.override = getattr(typing, "override", lambda f: f)
"""


@contextlib.contextmanager
def base_layer_not_refused() -> Iterator[None]:
    from codegen import target

    found = target.instrumentation_in

    def spans_only(root: Path) -> list[str]:
        return [phrase for phrase in found(root) if BASE_LAYER not in phrase]

    target.instrumentation_in = spans_only
    try:
        yield
    finally:
        target.instrumentation_in = found


def instrument(source: Path, dest: Path) -> Path:
    """The specs applied to ``source``, written to ``dest`` (a complete tree); ``dest``."""
    from codegen.emit.tree import write_tree
    from codegen.pipeline import generate

    with base_layer_not_refused():
        generation = generate(REPO / "specs", source=source)
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
