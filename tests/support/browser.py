"""Headless Chromium for the tests that open a page (the report's, the manual's): Debian's
``chromium``, networking off, the console on stderr, screenshots kept as test artifacts under
``build/test-artifacts/`` (``REPORT_ARTIFACTS`` overrides the folder)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
)  # fmt: skip
TIMEOUT_S = 120


def chromium() -> str:
    """The Chromium to run. Without one the calling test fails where ``CODEGEN_REQUIRE_BROWSER`` is
    set (tox sets it: CI must not pass by skipping) and is skipped elsewhere, naming why."""
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        why = "Chromium is needed for the browser test: apt-get install -y chromium (.ci/run installs it)"
        if os.environ.get("CODEGEN_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)
    return found


def artifacts() -> Path:
    folder = Path(os.environ.get("REPORT_ARTIFACTS") or REPO / "build" / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def browse(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]
