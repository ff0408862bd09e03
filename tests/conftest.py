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


# Session fixtures too costly to build on both xdist workers (a minute of pretrain() runs, the
# replaced main tree): the files that use one run on the same worker (tox passes --dist loadgroup).
SHARED_SESSION_FIXTURES = ("pretrain_runs", "main_root", "main_helpers")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    tests = Path(__file__).resolve().parent
    slow = [tests / name for name in SLOW_DIRS]
    for item in items:
        if any(directory in item.path.parents for directory in slow):
            item.add_marker(pytest.mark.slow)
    for item, group in _worker_groups(items).items():
        item.add_marker(pytest.mark.xdist_group(group))


def _worker_groups(items) -> dict[pytest.Item, str]:
    """Each test's xdist group: its file, or the first of the files joined by a shared fixture."""
    group: dict[Path, Path] = {}

    def find(path: Path) -> Path:
        while group.setdefault(path, path) != path:
            path = group[path]
        return path

    first_user: dict[str, Path] = {}
    for item in items:
        for name in SHARED_SESSION_FIXTURES:
            if name in getattr(item, "fixturenames", ()):
                other = first_user.setdefault(name, item.path)
                group[find(item.path)] = find(other)
    tests = Path(__file__).resolve().parent
    return {item: find(item.path).relative_to(tests).as_posix() for item in items}


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
