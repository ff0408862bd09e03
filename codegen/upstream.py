"""Locate the pristine megatron-core source tree: a user ``--source`` dir or a cached, pinned wheel."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

PACKAGE_DIR = "megatron"
COMPLETE_MARKER = ".complete"
WHEELS_DIR = "wheels"
PIP_TIMEOUT_S = 600

_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


@dataclass(frozen=True)
class UpstreamPin:
    distribution: str
    version: str
    filename: str
    sha256: str

    @property
    def tree_name(self) -> str:
        return f"{self.distribution}-{self.version}-{self.sha256[:12]}"


class UpstreamError(Exception):
    """Failure to provide the upstream tree; the message is one line meant for users."""


class UnrecognisedInstrumentation(Exception):
    """Hand-written instrumentation ``--replace-upstream`` does not recognise (exit 3): one located
    line per site (``path:line:col: error: ...``); nothing is written."""

    def __init__(self, lines: tuple[str, ...] | list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)


def source_root(pin: UpstreamPin, source: Path | None = None, cache_dir: Path | None = None) -> Path:
    """Return a directory containing ``megatron/`` for ``pin``: ``source`` or the cached wheel tree."""
    if source is not None:
        return _checked_source(source)
    _check_pin(pin)
    cache = default_cache_dir() if cache_dir is None else Path(os.path.abspath(cache_dir))
    tree = cache / pin.tree_name
    if _is_complete(tree):
        return tree
    return _populate(pin, cache, tree)


TELEMETRY_DIR = f"{PACKAGE_DIR}/core/telemetry"
REPLACE_FLAG = "--replace-upstream"

# What emits spans in a tree carrying Megatron-LM's hand-written instrumentation (PR #6438): the
# group-gated span context manager, the span decorator, the group gates and the ``_otel`` helper
# functions (lifecycle, flush, exit hooks). #6415's base layer (``megatron/core/telemetry/``:
# span-group constants, training metrics, no-op fallbacks) defines ``managed_span``/``trace_fn``
# but opens no span itself: it is not instrumentation, and it is not scanned.
_SPAN_SITES = (
    ("_otel_managed_span", re.compile(rb"\b_otel_managed_span\s*\(")),
    ("@_otel_trace_fn", re.compile(rb"@\s*_otel_trace_fn\s*\(")),
    ("_otel_sg_enabled", re.compile(rb"\b_otel_sg_enabled\s*\(")),
    ("def _*otel_*", re.compile(rb"^[ \t]*(def) _\w*otel_\w*\s*\(", re.MULTILINE)),
)


@dataclass(frozen=True)
class HandWritten:
    """One file's hand-written OpenTelemetry sites: where the first is and how many of each."""

    path: str  # relative to the tree's root
    line: int
    column: int
    counts: tuple[tuple[str, int], ...]

    def describe(self) -> str:
        what = ", ".join(f"{n} {name}" for name, n in self.counts)
        return f"{self.path}:{self.line}:{self.column} ({what})"


def candidate_files(root: Path) -> Iterator[Path]:
    telemetry = root / TELEMETRY_DIR
    """The entry scripts beside ``megatron/`` and its modules, less #6415's base layer."""
    yield from sorted(root.glob("*.py"))
    for path in sorted((root / PACKAGE_DIR).rglob("*.py")):
        if telemetry not in path.parents:
            yield path


def hand_written_sites(root: Path, runtime_package: str = "") -> list[HandWritten]:
    """Every file of the tree at ``root`` (``megatron/`` and the entry scripts beside it) that
    emits spans by hand, Megatron-LM's way (see ``_SPAN_SITES``). Read as bytes, never imported;
    an unreadable file counts as carrying none; ``runtime_package`` (this generator's, in an
    instrumented tree) is not read. (This generator's own constructs are not listed:
    a fork it wrote is stripped of them and instrumented afresh, see ``strip/ours.py``.)"""
    found: list[HandWritten] = []
    runtime = root / runtime_package.strip("/") if runtime_package.strip("/") else None
    for path in candidate_files(root):
        if runtime is not None and runtime in path.parents:
            continue  # this generator's runtime package, written into the tree
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if b"_otel_" not in data:
            continue
        counts: list[tuple[str, int]] = []
        first: int | None = None
        for name, pattern in _SPAN_SITES:
            matches = list(pattern.finditer(data))
            if matches:
                counts.append((name, len(matches)))
                start = matches[0].start(matches[0].lastindex or 0)
                first = start if first is None else min(first, start)
        if first is not None:
            line = data.count(b"\n", 0, first) + 1
            column = first - (data.rfind(b"\n", 0, first) + 1) + 1
            found.append(HandWritten(path.relative_to(root).as_posix(), line, column, tuple(counts)))
    return found


def default_cache_dir() -> Path:
    """``$CODEGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/megatron-otel-codegen``, else ``~/.cache/...``."""
    explicit = os.environ.get("CODEGEN_CACHE_DIR")
    if explicit:
        return Path(os.path.abspath(os.path.expanduser(explicit)))
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "megatron-otel-codegen"
    return Path.home() / ".cache" / "megatron-otel-codegen"


def download_wheel(pin: UpstreamPin, dest: Path) -> None:
    """Download ``pin``'s wheel into the empty directory ``dest`` with pip (replaceable in tests)."""
    requirement = f"{pin.distribution}=={pin.version}"
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
        "--disable-pip-version-check", "--dest", str(dest), requirement,
    ]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UpstreamError(f"pip download {requirement} could not run: {_one_line(str(exc))}") from exc
    if result.returncode != 0:
        tail = _tail(result.stderr) or _tail(result.stdout) or "no output"
        raise UpstreamError(f"pip download {requirement} failed (exit {result.returncode}): {tail}")


def _checked_source(source: Path) -> Path:
    source = source.expanduser()
    if not source.exists():
        raise UpstreamError(f"--source {source}: no such directory")
    if not source.is_dir():
        raise UpstreamError(f"--source {source}: not a directory")
    if not (source / PACKAGE_DIR).is_dir():
        raise UpstreamError(
            f"--source {source}: no {PACKAGE_DIR}/ directory inside "
            "(expected a Megatron-LM checkout or an unpacked megatron-core wheel)"
        )
    return source.resolve()


def _check_pin(pin: UpstreamPin) -> None:
    for label, value in (("distribution", pin.distribution), ("version", pin.version)):
        if not _NAME.fullmatch(value):
            raise UpstreamError(f"upstream pin has an invalid {label}: {value!r}")
    if not _NAME.fullmatch(pin.filename) or not pin.filename.endswith(".whl"):
        raise UpstreamError(f"upstream pin has an invalid wheel filename: {pin.filename!r}")
    if not _SHA256.fullmatch(pin.sha256):
        raise UpstreamError(f"upstream pin sha256 must be 64 lowercase hex digits, got {pin.sha256!r}")


def _is_complete(tree: Path) -> bool:
    # The marker is written last and the tree renamed into place whole, so two stats suffice.
    return os.path.isfile(tree / COMPLETE_MARKER) and os.path.isdir(tree / PACKAGE_DIR)


def _populate(pin: UpstreamPin, cache: Path, tree: Path) -> Path:
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with _exclusive_lock(cache / f".{tree.name}.lock"):
            if _is_complete(tree):  # another run finished while we waited
                return tree
            _remove_leftovers(cache, tree.name)
            wheel = _obtain_wheel(pin, cache, tree.name)
            _unpack(pin, wheel, cache, tree)
    except OSError as exc:
        raise UpstreamError(f"cannot prepare {tree}: {_one_line(str(exc))}") from exc
    return tree


@contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    # Serialises the slow path between processes; the atomic rename alone keeps readers safe.
    with open(path, "ab") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _remove_leftovers(cache: Path, tree_name: str) -> None:
    """Delete temp dirs of runs that died mid-way; safe because we hold the tree's lock."""
    for leftover in cache.glob(f".{tree_name}.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _obtain_wheel(pin: UpstreamPin, cache: Path, tree_name: str) -> Path:
    wheels = cache / WHEELS_DIR
    cached = wheels / pin.filename
    if cached.is_file() and _sha256(cached) == pin.sha256:
        return cached
    wheels.mkdir(exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{tree_name}.tmp-download-", dir=cache))
    try:
        download_wheel(pin, staging)
        fetched = staging / pin.filename
        if not fetched.is_file():
            found = ", ".join(sorted(p.name for p in staging.iterdir())) or "nothing"
            raise UpstreamError(f"download of {pin.filename} produced {found} instead")
        actual = _sha256(fetched)
        if actual != pin.sha256:
            raise UpstreamError(f"sha256 mismatch for {pin.filename}: expected {pin.sha256}, got {actual}")
        os.replace(fetched, cached)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return cached


def _unpack(pin: UpstreamPin, wheel: Path, cache: Path, tree: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{tree.name}.tmp-unpack-", dir=cache))
    try:
        _extract_package(wheel, staging)
        marker = f"{pin.distribution}=={pin.version} {pin.filename} sha256:{pin.sha256}\n"
        (staging / COMPLETE_MARKER).write_text(marker)
        staging.chmod(0o755)
        _publish(staging, tree, cache)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _publish(staging: Path, tree: Path, cache: Path) -> None:
    """Atomically rename ``staging`` to ``tree``; an existing complete tree wins."""
    try:
        os.rename(staging, tree)
        return
    except OSError:
        if _is_complete(tree):
            return
    # An incomplete tree (e.g. its marker was deleted) is moved aside, then replaced.
    trash = Path(tempfile.mkdtemp(prefix=f".{tree.name}.tmp-trash-", dir=cache))
    try:
        os.rename(tree, trash / tree.name)
        os.rename(staging, tree)
    finally:
        shutil.rmtree(trash, ignore_errors=True)


def _extract_package(wheel: Path, dest: Path) -> None:
    """Extract only ``megatron/**`` from ``wheel`` into ``dest``, refusing unsafe member names."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = archive.infolist()
            for info in members:
                if not _is_safe_member(info.filename):
                    raise UpstreamError(f"{wheel.name}: refusing unsafe archive member {info.filename!r}")
            wanted = [info for info in members if info.filename.startswith(f"{PACKAGE_DIR}/")]
            if not any(not info.is_dir() for info in wanted):
                raise UpstreamError(f"{wheel.name} contains no {PACKAGE_DIR}/ package")
            for info in wanted:
                _extract_member(archive, info, dest)
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise UpstreamError(f"{wheel} is not a readable wheel: {_one_line(str(exc))}") from exc


def _is_safe_member(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return bool(parts) and not (
        name.startswith("/") or "\\" in name or "\0" in name or ".." in parts or ":" in parts[0]
    )


def _extract_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path) -> None:
    target = dest.joinpath(*PurePosixPath(info.filename).parts)
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(info) as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tail(output: str, count: int = 2, width: int = 240) -> str:
    """The last few lines of pip's output, preferring its ``ERROR:`` lines, shortened to one line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    chosen = (errors or lines)[-count:]
    return " | ".join(line if len(line) <= width else line[: width - 3] + "..." for line in chosen)


def _one_line(text: str) -> str:
    return " ".join(text.split())
