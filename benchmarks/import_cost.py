"""Import cost of the installed instrumentation: ``import megatron.training.training`` woven by the
import hook of ``codegen package``'s wheel vs the same tree not woven, in one run.

Each sample is a fresh interpreter (``import_worker`` below) timing the import in-process; the
arms alternate round by round. Arms:

- ``plain``: the pristine tree, no hook (its own bytecode cached, as after any first import);
- ``woven``: the hook installed (``MegatronInstrumentor`` would do the same), instrumented
  bytecode cached;
- ``first``: the hook installed with an empty bytecode cache: compiling the instrumented sources
  once (the one-time cost).

Needs torch (megatron imports it): run under ``tox -e runtime``'s Python, or it is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from statistics import median

WORKER_CODE = r"""
import json, sys, time, typing, warnings
warnings.simplefilter("ignore")
typing.override = getattr(typing, "override", lambda f: f)
import torch  # the same for every arm: not part of what is compared
hook = sys.argv[1] == "1"
start = time.perf_counter()
if hook:
    from megatron_otel_instrumentation import _finder
    _finder.install()
import megatron.training.training as training
seconds = time.perf_counter() - start
print(json.dumps({"s": seconds, "loader": type(training.__loader__).__name__}))
"""


def _sample(python: str, tree: Path, site: Path, hook: bool, bytecode: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(tree)])
    env["MEGATRON_OTEL_BYTECODE_DIR"] = str(bytecode)
    env["PYTHONWARNINGS"] = "ignore"
    proc = subprocess.run(
        [python, "-c", WORKER_CODE, "1" if hook else "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"import worker exited {proc.returncode}: {proc.stderr[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(python: str, specs: Path, rounds: int) -> dict:
    from codegen.cli import main as codegen
    from codegen.upstream import default_cache_dir

    with tempfile.TemporaryDirectory(prefix="otel-bench-import-") as tmp:
        work = Path(tmp)
        if codegen(["package", str(specs), "--out", str(work / "dist")]) != 0:
            raise RuntimeError("codegen package failed")
        (wheel,) = (work / "dist").glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(work / "site")
        (pristine,) = (p for p in default_cache_dir().glob("megatron-core-0.19.2-*") if p.is_dir())
        shutil.copytree(
            pristine / "megatron", work / "tree" / "megatron"
        )  # its own __pycache__, not the cache's
        warm = work / "bytecode"
        # one import of each arm first: both bytecode caches warm
        _sample(python, work / "tree", work / "site", False, warm)
        checked = _sample(python, work / "tree", work / "site", True, warm)
        if checked["loader"] != "WovenLoader":
            raise RuntimeError(f"the hook did not weave megatron.training.training ({checked['loader']})")
        times: dict[str, list[float]] = {"plain": [], "woven": [], "first": []}
        for index in range(rounds):
            times["plain"].append(_sample(python, work / "tree", work / "site", False, warm)["s"])
            times["woven"].append(_sample(python, work / "tree", work / "site", True, warm)["s"])
            times["first"].append(
                _sample(python, work / "tree", work / "site", True, work / f"cold-{index}")["s"]
            )
        return {arm: {"min_s": min(v), "median_s": median(v), "samples": len(v)} for arm, v in times.items()}


def torch_python(explicit: str | None, repo: Path) -> str | None:
    """A Python that imports torch: given, this one, or tox -e runtime's."""
    candidates = (
        [explicit] if explicit else [sys.executable, str(repo / ".tox" / "runtime" / "bin" / "python")]
    )
    for python in candidates:
        if python and Path(python).exists():
            probe = subprocess.run(
                [python, "-c", "import torch"], capture_output=True, timeout=300, check=False
            )
            if probe.returncode == 0:
                return python
    return None
