"""Fixtures: the runtime rendered into tmp_path and importable under a unique top-level name."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

# The generator's package and this folder's support module, whatever pytest's import mode.
for _path in (Path(__file__).resolve().parents[2], Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from runtime_pkg_support import Rendered, make_project, render_into


@pytest.fixture
def unique_top() -> str:
    return f"otelrt_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def importable(tmp_path: Path, unique_top: str) -> Iterator[Path]:
    """tmp_path on sys.path for the test; modules imported from it are forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == unique_top or m.startswith(unique_top + ".")]:
            del sys.modules[name]


@pytest.fixture
def rendered(importable: Path, unique_top: str) -> Rendered:
    return render_into(importable, make_project(f"{unique_top}/core/otel"))


_ENV_PREFIXES = ("MEGATRON_OTEL_", "OTEL_", "SLURM_", "TORCHELASTIC_")
_ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No telemetry, rank or SLURM variables from the machine running the tests."""
    import os

    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES:
            monkeypatch.delenv(name)


@pytest.fixture
def exit_hooks(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[object]]:
    """Record atexit registrations and SIGTERM handler installs instead of making them."""
    import atexit
    import signal

    calls: dict[str, list[object]] = {"atexit": [], "sigterm": []}
    monkeypatch.setattr(atexit, "register", lambda fn, *a, **k: calls["atexit"].append(fn) or fn)
    real_signal = signal.signal

    def fake_signal(signum: int, handler: object) -> object:
        if signum == signal.SIGTERM:
            calls["sigterm"].append(handler)
            return signal.getsignal(signum)
        return real_signal(signum, handler)

    monkeypatch.setattr(signal, "signal", fake_signal)
    return calls


@pytest.fixture
def otel(rendered: Rendered, exit_hooks: dict[str, list[object]]) -> Iterator[ModuleType]:
    """The rendered runtime, imported with exit hooks recorded (not installed), reset afterwards."""
    module = rendered.import_runtime()
    yield module
    module.reset()
