"""The guides that run Megatron, from an empty environment: "Instrument an installed Megatron"
(docs/guide/installed.md) and "Review and carry the patches" (docs/guide/patches.md), every block
as written (``bash -e``), in a virtual environment the pages' own blocks make, never in this test's.

Which Python ran what (the pages say the same):

- ``job-env`` (both pages): Python 3.11. The pages ask for ``python3.12``; the only CPU build of
  torch 2.13.0 on the test machine is for 3.11 (pip takes it from disk, through this machine's pip
  configuration; the line's ``--index-url`` names PyTorch's CPU index, unreachable there, and
  tests/docs/test_cpu_torch_line.py checks that without such a configuration the line then
  fails) and the CUDA build is several GB, so the
  ``python3.12`` on the blocks' PATH is this 3.11 interpreter. ``PIP_RETRIES=0`` keeps pip from
  waiting on the unreachable index.
- ``installed-megatron``: Python 3.11 with ``PIP_IGNORE_REQUIRES_PYTHON=1`` (megatron-core's wheels
  ask for 3.12; its 3.11 wheel installs); the example runs no code that needs ``typing.override``.
- ``job-env-cuda``: a pip dry run (pip's own ``PIP_DRY_RUN``, ``PIP_IGNORE_INSTALLED``, and
  ``PIP_USE_FEATURE=fast-deps`` to read metadata only; the machine's pip configuration left out) in
  the environment ``job-env`` made: it must bring torch's CUDA build and the pinned triton.
  tools/check-constraints resolves the same for Python 3.12.
- ``fork``, ``install``, ``console`` (patches) and ``package``, ``instrument``, ``recording-path`` (installed): in the
  new environment, activated the way the pages say (its ``bin/`` first on PATH).

The new environment costs about a minute and a half and 1.7 GB of disk (torch and triton installed
into it); it is made once for the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

for _module in ("torch", "numpy", "opentelemetry.sdk.trace"):
    pytest.importorskip(_module, reason=f"{_module} is needed (tox -e runtime installs it)")

from tests.support.doc_blocks import INSTALLED, PATCHES, blocks, run_block, workspace
from tests.support.ports import free_port

EXAMPLE = "layer_example.py"
VERIFIED = "3 spans, 3 distinct names checked: 0 findings"


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_", "VIRTUAL_ENV"))
    }
    env.pop("PYTHONPATH", None)
    env.update(MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", PIP_RETRIES="0")
    env.update(extra)
    return env


def _python(job: Path, code: str) -> str:
    result = subprocess.run(
        [str(job / "bin" / "python"), "-c", code], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace after the pages' environment block: ``job-env/`` made as they write it."""
    assert blocks(INSTALLED)["job-env"] == blocks(PATCHES)["job-env"]
    assert blocks(INSTALLED)["job-env-cuda"] == blocks(PATCHES)["job-env-cuda"]
    root = workspace(tmp_path_factory.mktemp("guide-env"))
    shims = root.parent / "python3.12-is-3.11"
    shims.mkdir()
    (shims / "python3.12").symlink_to(
        Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    )
    run_block("job-env", root, env=_env(), page=INSTALLED, bindir=shims, timeout=900)
    job = root / "job-env"
    versions = json.loads(
        _python(
            job,
            "import json, torch, triton, numpy; print(json.dumps([torch.__version__, triton.__version__]))",
        )
    )
    assert versions == ["2.13.0+cpu", "3.7.1"], versions
    assert not list(job.glob("lib/python*/site-packages/megatron")), "megatron before the page installs it"
    return root


def test_cuda_block_brings_the_cuda_build_and_the_pinned_triton(work: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    env = _env(
        PIP_DRY_RUN="1",
        PIP_IGNORE_INSTALLED="1",
        PIP_USE_FEATURE="fast-deps",
        PIP_REPORT=str(report),
        PIP_CONFIG_FILE=os.devnull,  # not this machine's local CPU wheel: the public index's
        PIP_INDEX_URL="https://pypi.org/simple",
        PIP_PROGRESS_BAR="off",
    )
    for key in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        env.pop(key, None)
    run_block("job-env-cuda", work, env=env, page=INSTALLED, timeout=600)
    got = {
        i["metadata"]["name"].lower(): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    assert got["torch"] == "2.13.0" and got["triton"] == "3.7.1", got
    assert any(name.startswith("nvidia-") for name in got), got  # the CUDA build's libraries
    # a dry run: nothing was installed over the CPU build
    assert _python(work / "job-env", "import torch; print(torch.__version__)") == "2.13.0+cpu"


def test_patches_page_from_the_new_environment(work: Path) -> None:
    """The fork on PYTHONPATH, the OpenTelemetry packages installed into the job's environment,
    the example run by its python: the spans verify."""
    job = work / "job-env" / "bin"
    run_block("fork", work, env=_env(), page=PATCHES)
    run_block("install", work, env=_env(), page=PATCHES, bindir=job)
    assert (
        _python(work / "job-env", "import opentelemetry.sdk, opentelemetry.exporter.otlp; print('ok')")
        == "ok"
    )
    (work / EXAMPLE).write_text(blocks(PATCHES)[f"file {EXAMPLE}"], encoding="utf-8")
    output = run_block("console", work, env=_env(), page=PATCHES, bindir=job, timeout=500)
    assert VERIFIED in output


def test_installed_page_from_the_new_environment(work: Path) -> None:
    """megatron-core installed into the job's environment, the instrumentation wheel built and
    installed, the page's own example run under opentelemetry-instrument: the spans verify, and the
    page's recording-path command shows the lean path."""
    job = work / "job-env" / "bin"
    run_block(
        "installed-megatron", work, env=_env(PIP_IGNORE_REQUIRES_PYTHON="1"), page=INSTALLED, bindir=job
    )
    assert _python(work / "job-env", "import megatron.core; print(megatron.core.__version__)") == "0.19.2"
    run_block("package", work, env=_env(), page=INSTALLED, bindir=job)
    (work / EXAMPLE).write_text(blocks(INSTALLED)[f"file {EXAMPLE}"], encoding="utf-8")
    output = run_block("instrument", work, env=_env(), page=INSTALLED, bindir=job, timeout=500)
    assert VERIFIED in output
    assert '"megatron.layer.forward"' in (work / "installed-capture.json").read_text()
    # the example takes the lean path through the distro's provider, and the page's command says so
    said = run_block("recording-path", work, env=_env(), page=INSTALLED, bindir=job, timeout=500)
    lean = "megatron.core.otel: telemetry: spans record on the lean path, through the global (or given) "
    assert lean + "tracer provider (TracerProvider)" in said, said[-3000:]
