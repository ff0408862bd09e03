"""source_root: --source validation, pinned wheel download, verification, safe unpack and caching."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from codegen import upstream
from codegen.upstream import COMPLETE_MARKER, UpstreamError, UpstreamPin, default_cache_dir, source_root

FILENAME = "megatron_core-0.0.1-cp312-cp312-manylinux_2_28_x86_64.whl"
MEMBERS = {
    "megatron/__init__.py": b"",
    "megatron/core/__init__.py": b"VERSION = '0.0.1'\n",
    "megatron/core/transformer/block.py": b"class Block:\n    pass\n",
    "megatron_core-0.0.1.dist-info/METADATA": b"Name: megatron-core\n",
    "megatron_core-0.0.1.dist-info/RECORD": b"",
}

REAL_PIN = UpstreamPin(
    distribution="megatron-core",
    version="0.19.2",
    filename="megatron_core-0.19.2-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    sha256="8e3e486f13f559450415b9b9dc0ff3331a0bb83dd154553f7f350a75ff9c42b5",
)


def _build_wheel(path: Path, members: dict[str, bytes]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pin(sha256: str) -> UpstreamPin:
    return UpstreamPin(distribution="megatron-core", version="0.0.1", filename=FILENAME, sha256=sha256)


class FakeDownloader:
    """Stands in for pip: copies a prepared wheel into the destination and counts calls."""

    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        self.calls = 0

    def __call__(self, pin: UpstreamPin, dest: Path) -> None:
        self.calls += 1
        (dest / pin.filename).write_bytes(self.wheel.read_bytes())


def _forbid_download(pin: UpstreamPin, dest: Path) -> None:
    raise AssertionError("the downloader must not be called")


@dataclass
class Wheel:
    """The fixture wheel at ``path`` (its sha256 ``sha``), unpacked by ``source_root`` into ``cache``."""

    path: Path
    sha: str
    cache: Path
    monkeypatch: pytest.MonkeyPatch

    @property
    def tree(self) -> Path:
        return self.cache / f"megatron-core-0.0.1-{self.sha[:12]}"

    def download(self, downloader: Callable[[UpstreamPin, Path], None] | None = None) -> FakeDownloader:
        """Put ``downloader`` (a new ``FakeDownloader`` of the wheel by default) in pip's place."""
        fake = FakeDownloader(self.path)
        self.monkeypatch.setattr(upstream, "download_wheel", downloader or fake)
        return fake

    def source_root(self) -> Path:
        return source_root(_pin(self.sha), cache_dir=self.cache)

    def temporaries(self) -> list[str]:
        return [p.name for p in self.cache.iterdir() if ".tmp-" in p.name]


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def wheel(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> Wheel:
    path = tmp_path / "src" / FILENAME
    return Wheel(path, _build_wheel(path, MEMBERS), cache, monkeypatch)


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_downloads_verifies_and_unpacks_megatron_only(wheel: Wheel) -> None:
    fake = wheel.download()
    root = wheel.source_root()
    assert root == wheel.tree
    assert fake.calls == 1
    assert _files(root) == {
        COMPLETE_MARKER,
        "megatron/__init__.py",
        "megatron/core/__init__.py",
        "megatron/core/transformer/block.py",
    }
    block = "megatron/core/transformer/block.py"
    assert (root / block).read_bytes() == MEMBERS[block]
    assert (wheel.cache / "wheels" / FILENAME).read_bytes() == wheel.path.read_bytes()
    assert not wheel.temporaries()


def test_cache_hit_skips_the_downloader(wheel: Wheel, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel.download()
    first = wheel.source_root()
    (wheel.cache / "wheels" / FILENAME).unlink()  # the fast path must not even look at the wheel
    wheel.download(_forbid_download)
    monkeypatch.setattr(upstream, "_populate", lambda *args: pytest.fail("fast path must not lock or hash"))
    assert wheel.source_root() == first


def test_tree_finished_while_waiting_for_the_lock_is_used(
    wheel: Wheel, monkeypatch: pytest.MonkeyPatch
) -> None:
    @contextmanager
    def other_run_finishes_first(lock: Path) -> Iterator[None]:
        (wheel.tree / "megatron").mkdir(parents=True)
        (wheel.tree / COMPLETE_MARKER).write_text("other run\n")
        yield

    monkeypatch.setattr(upstream, "_exclusive_lock", other_run_finishes_first)
    wheel.download(_forbid_download)
    assert wheel.source_root() == wheel.tree
    assert (wheel.tree / COMPLETE_MARKER).read_text() == "other run\n"


@pytest.mark.parametrize("cached", [None, b"truncated"], ids=["matching", "corrupt"])
def test_cached_wheel_is_reused_only_with_a_matching_hash(wheel: Wheel, cached: bytes | None) -> None:
    (wheel.cache / "wheels").mkdir(parents=True)
    (wheel.cache / "wheels" / FILENAME).write_bytes(cached or wheel.path.read_bytes())
    fake = wheel.download(None if cached else _forbid_download)
    assert (wheel.source_root() / "megatron/__init__.py").is_file()
    assert fake.calls == (1 if cached else 0)
    assert (wheel.cache / "wheels" / FILENAME).read_bytes() == wheel.path.read_bytes()


def test_sha_mismatch_names_both_hashes(wheel: Wheel) -> None:
    expected = "0" * 64
    wheel.download()
    with pytest.raises(UpstreamError) as info:
        source_root(_pin(expected), cache_dir=wheel.cache)
    message = str(info.value)
    assert expected in message and wheel.sha in message and "\n" not in message
    assert wheel.path.read_bytes()  # the source wheel is untouched
    assert not (wheel.cache / "wheels" / FILENAME).exists()
    assert not (wheel.cache / f"megatron-core-0.0.1-{expected[:12]}").exists()
    assert not wheel.temporaries()


UNSAFE_MEMBERS = [
    "megatron/../evil.py",
    "/megatron/evil.py",
    "../megatron/evil.py",
    "megatron\\..\\evil.py",
    "evil/../../x.py",
]


@pytest.mark.parametrize(
    ("members", "message"),
    [({**MEMBERS, member: b"pwned"}, "unsafe archive member") for member in UNSAFE_MEMBERS]
    + [({"other/__init__.py": b""}, "contains no megatron/ package")],
    ids=[*UNSAFE_MEMBERS, "no-megatron"],
)
def test_unsafe_or_foreign_wheel_is_rejected(
    wheel: Wheel, tmp_path: Path, members: dict[str, bytes], message: str
) -> None:
    wheel.sha = _build_wheel(wheel.path, members)
    wheel.download()
    with pytest.raises(UpstreamError, match=message):
        wheel.source_root()
    assert not wheel.tree.exists()
    assert not [p for p in tmp_path.rglob("*") if p.name in ("evil.py", "x.py")]


def test_crash_mid_unpack_leaves_nothing_visible(wheel: Wheel, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel.download()
    real_extract = upstream._extract_member
    extracted: list[str] = []

    def crash_after_first(archive: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path) -> None:
        if extracted:
            raise KeyboardInterrupt
        extracted.append(info.filename)
        real_extract(archive, info, dest)

    monkeypatch.setattr(upstream, "_extract_member", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        wheel.source_root()
    assert extracted and not wheel.tree.exists()
    assert not wheel.temporaries()

    monkeypatch.setattr(upstream, "_extract_member", real_extract)
    assert wheel.source_root() == wheel.tree
    assert (wheel.tree / COMPLETE_MARKER).is_file()
    assert (wheel.tree / "megatron/core/transformer/block.py").is_file()


def test_killed_run_leftovers_are_redone(wheel: Wheel) -> None:
    """A tree without its marker (or a dead run's temp dir) is never returned but rebuilt."""
    tree = wheel.tree
    (tree / "megatron").mkdir(parents=True)
    (tree / "megatron/half_written.py").write_bytes(b"x = ")
    leftover = wheel.cache / f".{tree.name}.tmp-unpack-dead"
    (leftover / "megatron").mkdir(parents=True)
    fake = wheel.download()
    assert wheel.source_root() == tree
    assert fake.calls == 1
    assert "megatron/half_written.py" not in _files(tree)
    assert (tree / COMPLETE_MARKER).is_file()
    assert not leftover.exists()


def test_losing_the_rename_race_uses_the_winners_tree(wheel: Wheel) -> None:
    tree = wheel.tree
    fake = FakeDownloader(wheel.path)

    def download_while_another_run_finishes(pin: UpstreamPin, dest: Path) -> None:
        fake(pin, dest)
        (tree / "megatron").mkdir(parents=True)
        (tree / "megatron/winner.py").write_bytes(b"")
        (tree / COMPLETE_MARKER).write_text("winner\n")

    wheel.download(download_while_another_run_finishes)
    assert wheel.source_root() == tree
    assert _files(tree) == {COMPLETE_MARKER, "megatron/winner.py"}
    assert not wheel.temporaries()


def test_source_without_megatron_is_an_error(tmp_path: Path) -> None:
    checkout = tmp_path / "Megatron-LM"
    (checkout / "docs").mkdir(parents=True)
    with pytest.raises(UpstreamError) as info:
        source_root(REAL_PIN, source=checkout)
    message = str(info.value)
    assert message.startswith(f"--source {checkout}:") and "megatron/" in message and "\n" not in message
    with pytest.raises(UpstreamError, match="no such directory"):
        source_root(REAL_PIN, source=tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(UpstreamError, match="not a directory"):
        source_root(REAL_PIN, source=tmp_path / "file")


def test_source_is_returned_resolved_and_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = tmp_path / "Megatron-LM"
    (checkout / "megatron/core").mkdir(parents=True)
    (checkout / "megatron/core/__init__.py").write_text("")
    before = _files(checkout)
    monkeypatch.setattr(upstream, "download_wheel", _forbid_download)
    monkeypatch.chdir(tmp_path)
    assert source_root(REAL_PIN, source=Path("Megatron-LM/../Megatron-LM")) == checkout.resolve()
    assert _files(checkout) == before


def test_invalid_pin_is_rejected(cache: Path) -> None:
    with pytest.raises(UpstreamError, match="sha256"):
        source_root(_pin("ABC"), cache_dir=cache)
    with pytest.raises(UpstreamError, match="distribution"):
        source_root(UpstreamPin("../x", "1", FILENAME, "0" * 64), cache_dir=cache)
    assert not cache.exists()


def test_pip_failure_reports_the_end_of_stderr(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def failing_pip(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(command)
        versions = ", ".join(f"0.{i}.0" for i in range(500))
        stderr = (
            "Looking in indexes\n"
            f"ERROR: Could not find a version (from versions: {versions})\n"
            "ERROR: No matching distribution found\n"
        )
        return subprocess.CompletedProcess(command, 1, stdout="", stderr=stderr)

    monkeypatch.setattr(subprocess, "run", failing_pip)
    with pytest.raises(UpstreamError) as info:
        source_root(_pin("0" * 64), cache_dir=cache)
    message = str(info.value)
    assert "megatron-core==0.0.1" in message and "No matching distribution found" in message
    assert "\n" not in message and len(message) < 600
    command = seen[0]
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert command[-1] == "megatron-core==0.0.1"
    for flag in ("--no-deps", "--only-binary=:all:"):
        assert flag in command
    for flag, value in (
        ("--python-version", "3.12"),
        ("--implementation", "cp"),
        ("--platform", "manylinux_2_28_x86_64"),
    ):
        assert command[command.index(flag) + 1] == value
    assert Path(command[command.index("--dest") + 1]).parent == cache


def test_default_cache_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CODEGEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_cache_dir() == tmp_path / "home/.cache/megatron-otel-codegen"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg/megatron-otel-codegen"
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"


def test_cache_dir_from_environment_is_used(
    wheel: Wheel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(tmp_path / "env-cache"))
    wheel.download()
    assert source_root(_pin(wheel.sha)).parent == tmp_path / "env-cache"


def test_real_megatron_core_wheel(tmp_path: Path) -> None:
    # from the package index, as the README's first command does (the suite fetches the other
    # supported releases' wheels the same way): not skipped offline, the suite needs the index
    root = source_root(REAL_PIN, cache_dir=tmp_path)
    assert (root / "megatron/core/__init__.py").is_file()
    assert (tmp_path / "wheels" / REAL_PIN.filename).is_file()
    assert source_root(REAL_PIN, cache_dir=tmp_path) == root
