"""Fixtures: the instrumented megatron-core fork, built once, and worker runs on CPU.

These tests need torch (CPU build), triton, numpy and the OpenTelemetry SDK; without them the
test module skips itself (the ``runtime`` tox environment installs them), so nothing here
imports torch at module level. Megatron runs in
subprocesses (``megatron_cpu_worker.py``) with ``PYTHONPATH`` pointing at either the pristine
release or the instrumented fork: both are importable as ``megatron``, and megatron keeps global
state (process groups), so neither is ever imported into the pytest process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "megatron_cpu_worker.py"
WORKER_TIMEOUT_S = 240

from codegen.atomic import write_tree
from codegen.pipeline import generate
from codegen.upstream import default_cache_dir
from tests.megatron_cpu.main_tree import instrument, shims
from tests.megatron_cpu.pretrain_harness import build_dataset_helpers, load_runs, run_all
from tests.support.instrumentation_wheel import build_wheel, install_wheel
from tests.support.megatron_workers import communicate_all, worker_env
from tests.support.ports import free_port
from tests.support.upstream_main import snapshot


def _start(root: Path, args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        cwd=cwd,
        env=worker_env(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(procs: list[subprocess.Popen], what: str) -> None:
    failures = []
    for proc, (output, timed_out) in zip(procs, communicate_all(procs, WORKER_TIMEOUT_S)):
        if timed_out:
            failures.append(f"timed out after {WORKER_TIMEOUT_S}s\n{output[-4000:]}")
        elif proc.returncode != 0:
            failures.append(f"exit {proc.returncode}\n{output[-4000:]}")
    if failures:
        pytest.fail(f"megatron CPU worker ({what}) failed:\n" + "\n---\n".join(failures))


def _load(path: Path) -> dict[str, Any]:
    import torch

    return torch.load(path, weights_only=False)


@pytest.fixture(scope="session")
def generation():
    return generate(REPO / "specs")


@pytest.fixture(scope="session")
def pristine_root(generation) -> Path:
    """The unpacked megatron-core release the specs pin (read only)."""
    return generation.source_root


@pytest.fixture(scope="session")
def fork_root(generation, tmp_path_factory) -> Path:
    """The instrumented megatron-core fork, written once per session."""
    dest = tmp_path_factory.mktemp("fork") / "megatron-core"
    write_tree(
        dest, {path: new for path, (_old, new) in generation.changes.items()}, base=generation.source_root
    )
    return dest


@pytest.fixture(scope="session")
def train_results(pristine_root, fork_root, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Pristine (``plain``) and instrumented (``off``, ``all``, ``default``) runs, concurrently.

    Returns ``{"pristine": ..., "instrumented": ...}``, each the worker's saved dict.
    """
    work = tmp_path_factory.mktemp("train")
    jobs = {
        "pristine": (pristine_root, "plain"),
        "instrumented": (fork_root, "off,all,default"),
    }
    procs = []
    for name, (root, runs) in jobs.items():
        out = work / f"{name}.pt"
        args = ["train", "--out", str(out), "--runs", runs, "--port", str(free_port())]
        procs.append(_start(root, args, work))
    _finish(procs, "train")
    return {name: _load(work / f"{name}.pt") for name in jobs}


@pytest.fixture(scope="session")
def p2p_results(fork_root, tmp_path_factory) -> list[dict[str, Any]]:
    """Two ranks of the instrumented fork exchanging tensors through P2PCommunicator."""
    work = tmp_path_factory.mktemp("p2p")
    port = str(free_port())
    procs = [
        _start(
            fork_root,
            ["p2p", "--out", str(work / f"rank{rank}.pt"), "--rank", str(rank), "--port", port],
            work,
        )
        for rank in (0, 1)
    ]
    _finish(procs, "p2p")
    return [_load(work / f"rank{rank}.pt") for rank in (0, 1)]


@pytest.fixture(scope="session")
def dataset_helpers(pristine_root, tmp_path_factory) -> Path:
    """megatron-core's dataset helpers (``helpers.cpp``) built once for this Python with pybind11."""
    source = pristine_root / "megatron/core/datasets/helpers.cpp"
    return build_dataset_helpers(source, tmp_path_factory.mktemp("helpers"))


@pytest.fixture(scope="session")
def pretrain_runs(pristine_root, fork_root, dataset_helpers, tmp_path_factory):
    """Every configuration of ``pretrain_harness.CONFIGS``, run once per session.

    ``MEGATRON_CPU_PRETRAIN_DIR=DIR`` keeps the runs in DIR and, when DIR already holds them,
    checks those again instead of running (for working on the tests, never set in CI).
    """
    keep = os.environ.get("MEGATRON_CPU_PRETRAIN_DIR")
    if keep:
        work = Path(keep)
        runs = load_runs(work)
        if runs is not None:
            return runs
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = tmp_path_factory.mktemp("pretrain")
    roots = {"pristine": pristine_root, "fork": fork_root}
    return run_all(roots, dataset_helpers, work, free_port)


# -- Megatron-LM main (issue 25) ------------------------------------------------------------------


@pytest.fixture(scope="session")
def main_root(tmp_path_factory) -> Path:
    """Megatron-LM main with #6438 in replace mode: stripped, then instrumented by the specs."""
    tree = tmp_path_factory.mktemp("main") / "megatron-lm"
    return instrument(snapshot("with"), tree, replace=True, runtime=MAIN_RUNTIME)


# The replaced main tree's runtime mode: vendored (CI's run), or with CODEGEN_MAIN_RUNTIME=dependency
# the import shim on the megatron-otel-runtime wheel (issue 32: `codegen package --runtime`'s wheel
# installed from its file into main_shims, which every main test puts on PYTHONPATH).
MAIN_RUNTIME = os.environ.get("CODEGEN_MAIN_RUNTIME", "vendored")


@pytest.fixture(scope="session")
def main_shims(tmp_path_factory) -> Path:
    directory = shims(tmp_path_factory.mktemp("shims"))
    if MAIN_RUNTIME == "dependency":
        install_wheel(build_wheel(tmp_path_factory.mktemp("dist"), "--runtime"), directory)
    return directory


@pytest.fixture(scope="session")
def main_helpers(tmp_path_factory) -> Path:
    """Main's dataset helpers (``helpers.cpp``) built for this Python."""
    source = snapshot("minus") / "megatron/core/datasets/helpers.cpp"
    return build_dataset_helpers(source, tmp_path_factory.mktemp("main-helpers"))


@pytest.fixture(scope="session")
def nemo_lens_site() -> Path:
    """nemo-lens (the version constraints.txt pins) installed into a directory of its own, once.

    It declares Python >= 3.13; installed with --ignore-requires-python and --no-deps (its
    dependencies, the OpenTelemetry API and SDK, are the runtime environment's). On 3.11 it needs
    one shim (py311_shims.py)."""
    pins = [
        line.strip()
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if line.startswith("nemo-lens==")
    ]
    assert pins, "constraints.txt pins no nemo-lens"
    target = default_cache_dir() / pins[0].replace("==", "-")
    if not (target / ".installed").is_file():
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--ignore-requires-python",
            "--target", str(target), pins[0],
        ]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
        (target / ".installed").write_text(pins[0])
    return target
