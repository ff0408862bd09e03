"""Suite-wide: nothing writes into the user's ~/.cache; the span exporter and tracer provider
fixtures the runtime tests share.

tox sets CODEGEN_CACHE_DIR to .tox/codegen-cache; a plain ``pytest`` run uses the same directory,
so the pinned megatron-core wheel is fetched once and shared, and the user's cache (and any result
cached there) never takes part in a test. Subprocesses the tests start inherit the setting.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

REPO = Path(__file__).resolve().parents[1]
SUITE_CACHE = REPO / ".tox" / "codegen-cache"


def pytest_configure(config) -> None:
    if not os.environ.get("CODEGEN_CACHE_DIR"):
        os.environ["CODEGEN_CACHE_DIR"] = str(SUITE_CACHE)


# Directories whose every test is slow: the real megatron-core tree generated and checked
# (tests/target), Megatron itself run on CPU with torch (tests/megatron_cpu), GPU runs (tests/gpu).
# Elsewhere a slow test carries @pytest.mark.slow itself. `pytest -m "not slow"` leaves them out.
SLOW_DIRS = ("target", "megatron_cpu", "gpu")


def pytest_collection_modifyitems(config, items) -> None:
    tests = Path(__file__).resolve().parent
    slow = [tests / name for name in SLOW_DIRS]
    for item in items:
        if any(directory in item.path.parents for directory in slow):
            item.add_marker(pytest.mark.slow)
    if config.pluginmanager.has_plugin("xdist") and config.getoption("dist") == "load":
        from tests.support.xdist_files import costliest_first

        items.sort(key=lambda item: costliest_first(item.path.relative_to(REPO).as_posix()))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (tox -e runtime), with the files of ``SAME_WORKER`` on one worker. (``--dist loadgroup``
    cannot say it: pytest-xdist 3.8 marks a group on ``item._nodeid``, which pytest 9 no longer
    reads.)"""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    from tests.support.xdist_files import SAME_WORKER

    class SharedFixtureScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SAME_WORKER.get(path, path)

    return SharedFixtureScheduling(config, log)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """Finished spans, in memory."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    """A tracer provider exporting each span to ``exporter`` as it ends (no exit hook of its own)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider
