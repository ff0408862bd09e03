"""Megatron-LM main snapshots (test data, never copied into the project): main at d98e8a64dd with
upstream's hand-written telemetry (PR #6438) and the same commit with #6438 reverted.

They are read from where they lie: the directory ``$CODEGEN_UPSTREAM_SNAPSHOTS`` names (``.ci/run``
points it at ``../shared/upstream/``), else ``../shared/upstream/`` beside the checkout when it
exists. Each tarball is unpacked once per test session into a directory of its own under the
suite's cache and handed out read-only by convention (copy before editing).
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WITH_6438 = "megatron-lm-main-d98e8a64dd.tar.gz"
MINUS_6438 = "megatron-lm-main-d98e8a64dd-minus-6438.tar.gz"
SNAPSHOTS = {"with": WITH_6438, "minus": MINUS_6438}
ENV = "CODEGEN_UPSTREAM_SNAPSHOTS"


def snapshot_dir() -> Path | None:
    """Where the tarballs lie, or None when no setting names them and the default is absent.
    A setting that names a directory without them is an error, not a skip."""
    named = os.environ.get(ENV)
    if named:
        path = Path(named).expanduser().resolve()
        missing = [name for name in SNAPSHOTS.values() if not (path / name).is_file()]
        if missing:
            raise FileNotFoundError(f"${ENV}={named}: {', '.join(missing)} not there")
        return path
    default = (REPO.parent / "shared" / "upstream").resolve()
    return default if all((default / n).is_file() for n in SNAPSHOTS.values()) else None


def _unpack_root() -> Path:
    cache = Path(os.environ.get("CODEGEN_CACHE_DIR") or REPO / ".tox" / "codegen-cache")
    return cache / "upstream-main"


def snapshot(which: str) -> Path:
    """The unpacked tree of ``which`` ("with" or "minus"); skips the calling test, naming why, when
    no snapshot directory is configured."""
    directory = snapshot_dir()
    if directory is None:
        pytest.skip(f"Megatron-LM main snapshots not found: set ${ENV} to ../shared/upstream/")
    tarball = directory / SNAPSHOTS[which]
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()[:16]
    target = _unpack_root() / f"{which}-{digest}"
    if not (target / ".unpacked").is_file():
        partial = target.with_name(target.name + f".partial-{os.getpid()}")
        partial.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as archive:
            archive.extractall(partial, filter="data")
        (partial / ".unpacked").write_text("")
        try:
            partial.rename(target)
        except OSError:  # another process unpacked it first
            pass
    return target
