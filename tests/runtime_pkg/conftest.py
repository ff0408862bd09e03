"""Fixtures: the runtime rendered into tmp_path and importable under a unique top-level name."""

from __future__ import annotations

import atexit
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from runtime_pkg_support import Rendered, make_project, render_into

from tests.support.modules import forget, mount


@pytest.fixture
def unique_top() -> str:
    return f"otelrt_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def importable(tmp_path: Path, unique_top: str) -> Iterator[Path]:
    """The package ``unique_top`` importable from tmp_path for the test (mounted, not on sys.path);
    modules imported from it are forgotten afterwards."""
    mount(tmp_path, unique_top)
    try:
        yield tmp_path
    finally:
        forget(unique_top)


@pytest.fixture
def rendered(importable: Path, unique_top: str) -> Rendered:
    return render_into(importable, make_project(f"{unique_top}/core/otel"))


_ENV_PREFIXES = ("MEGATRON_OTEL_", "OTEL_", "SLURM_", "TORCHELASTIC_")
_ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No telemetry, rank or SLURM variables from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES:
            monkeypatch.delenv(name)


@pytest.fixture
def exit_hooks(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[object]]:
    """Record atexit registrations and SIGTERM handler installs instead of making them."""
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
def sites(rendered: Rendered) -> ModuleType:
    """The call sites (runtime_pkg_support.CALL_SITES) on the rendered runtime, imported."""
    return rendered.import_call_sites()


@pytest.fixture
def otel(rendered: Rendered, exit_hooks: dict[str, list[object]]) -> Iterator[ModuleType]:
    """The rendered runtime, imported with exit hooks recorded (not installed), reset afterwards."""
    module = rendered.import_runtime()
    yield module
    module.reset()
