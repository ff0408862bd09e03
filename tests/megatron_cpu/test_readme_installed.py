"""README "Instrument an installed Megatron", every block as written (``bash -e``): the wheel built
by ``codegen package`` and pip-installed into an environment where megatron-core 0.19.2 is
installed (tests/megatron_cpu/installed_site.py), then ``layer_example.py`` (the example of
"Review and carry the patches") run under ``opentelemetry-instrument`` with the console exporter,
and ``codegen verify`` accepting the capture; then the same example with the runtime's logger
shown, saying that it recorded on the lean path through the distro's provider.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

for _module in ("torch", "numpy", "opentelemetry.instrumentation", "opentelemetry.distro"):
    pytest.importorskip(_module, reason=f"{_module} is needed (tox -e runtime installs it)")

from tests.megatron_cpu.conftest import free_port
from tests.megatron_cpu.installed_site import make_site
from tests.readme_blocks import INSTALLED, blocks, run_block, workspace


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    env.pop("PYTHONPATH", None)
    env.update(MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    # after the block's environment: opentelemetry-instrument, installed with the distro in the
    # runtime environment this test's environment sees (pip found the distro there already)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def test_installed_blocks(tmp_path: Path) -> None:
    assert set(blocks(INSTALLED)) == {"package", "instrument", "recording-path"}
    site = make_site(tmp_path / "venv")
    work = workspace(tmp_path / "work")
    run_block("package", work, env=_env(), page=INSTALLED, bindir=site / "bin")
    installed = list(site.glob("lib/python*/site-packages/megatron_otel_instrumentation/_finder.py"))
    assert installed, "the block did not install the wheel into the environment"
    (work / "layer_example.py").write_text(blocks()["file layer_example.py"], encoding="utf-8")
    output = run_block("instrument", work, env=_env(), page=INSTALLED, bindir=site / "bin", timeout=500)
    assert "3 spans, 3 distinct names checked: 0 findings" in output
    capture = (work / "installed-capture.json").read_text()
    assert '"megatron.layer.forward"' in capture
    # the example takes the lean path through the distro's provider, and the guide's command says so
    said = run_block("recording-path", work, env=_env(), page=INSTALLED, bindir=site / "bin", timeout=500)
    lean = "megatron.core.otel: telemetry: spans record on the lean path, through the global (or given) "
    assert lean + "tracer provider (TracerProvider)" in said, said[-3000:]
