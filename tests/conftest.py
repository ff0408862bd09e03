"""Suite-wide: nothing writes into the user's ~/.cache.

tox sets CODEGEN_CACHE_DIR to .tox/codegen-cache; a plain ``pytest`` run uses the same directory,
so the pinned megatron-core wheel is fetched once and shared, and the user's cache (and any result
cached there) never takes part in a test. Subprocesses the tests start inherit the setting.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE_CACHE = REPO / ".tox" / "codegen-cache"


def pytest_configure(config) -> None:
    if not os.environ.get("CODEGEN_CACHE_DIR"):
        os.environ["CODEGEN_CACHE_DIR"] = str(SUITE_CACHE)
