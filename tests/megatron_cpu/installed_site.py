"""A fresh virtual environment with megatron-core 0.19.2 pip-installed into its site-packages.

It sees this (runtime) environment's packages (torch, the OpenTelemetry SDK,
opentelemetry-instrumentation, the distro) through a ``.pth`` file, so nothing multi-GB is
installed twice, and what the tests install goes into its own site-packages by real ``pip
install``s. megatron-core's wheel is tagged cp312 and asks for Python >= 3.12: on 3.11 pip installs
it with ``--ignore-requires-python --python-version 3.12 --only-binary=:all: --platform
manylinux_2_28_x86_64 --implementation cp --target <site-packages>`` (the test workers shim
``typing.override``, the one 3.12 name megatron.training uses).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path


def make_site(env_dir: Path, *wheels: Path) -> Path:
    """Create ``env_dir``, install megatron-core 0.19.2 and ``wheels`` (``--no-deps``); return it."""
    from codegen.upstream import default_cache_dir

    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    packages = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (packages / "runtime-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (megatron_wheel,) = (default_cache_dir() / "wheels").glob("megatron_core-0.19.2-*.whl")
    pip = [python, "-m", "pip", "install", "-q", "--no-deps"]
    steps = [[*pip, "--target", packages, megatron_wheel]]
    if sys.version_info < (3, 12):
        steps = [
            [*pip, "--ignore-requires-python", "--python-version", "3.12", "--only-binary=:all:",
             "--platform", "manylinux_2_28_x86_64", "--implementation", "cp", "--target", packages, megatron_wheel]
        ]  # fmt: skip
    steps += [[*pip, wheel] for wheel in wheels]
    for step in steps:
        result = subprocess.run([str(a) for a in step], capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return env_dir
