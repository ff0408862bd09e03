"""Every file the generator writes goes through here: atomically, or not at all.

Two shapes of write, one rule (a temporary beside the destination, renamed over it only once every
temporary is complete; on any error the temporaries go and the destination is as it was):

- ``write_tree``: a whole directory replaced (``generated/``, a fork with ``--out``);
- ``write_files`` / ``staged``: some files inside a directory that stays (an in-place checkout, a
  report's outputs), each keeping the mode of the file it replaces; ``None`` deletes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO


class Staging:
    """Files being written under ``root``: each a temporary until the batch is committed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._staged: list[tuple[Path, Path]] = []
        self._deleted: list[Path] = []

    def write(self, rel: str, data: bytes | str | None) -> None:
        """Stage ``data`` for ``root/rel`` (str: UTF-8, newlines as given; None: delete it)."""
        if data is None:
            self._deleted.append(self.root / rel)
            return
        with self.open(rel) as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)

    @contextmanager
    def open(self, rel: str) -> Iterator[IO[bytes]]:
        """A binary handle on the temporary standing for ``root/rel`` (for writes streamed out)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".codegen", dir=path.parent)
        self._staged.append((Path(name), path))
        with os.fdopen(handle, "wb") as out:
            yield out
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
        os.chmod(name, mode)

    def discard(self) -> None:
        for staging, _ in self._staged:
            staging.unlink(missing_ok=True)

    def commit(self) -> None:
        for staging, destination in self._staged:
            os.replace(staging, destination)
        for gone in self._deleted:
            gone.unlink(missing_ok=True)
            try:
                gone.parent.rmdir()  # a folder this run emptied (the runtime package, docs) goes too
            except OSError:
                pass


@contextmanager
def staged(root: Path) -> Iterator[Staging]:
    """Stage writes under ``root``; they all land when the block ends, none when it raises."""
    staging = Staging(root)
    try:
        yield staging
    except BaseException:
        staging.discard()
        raise
    staging.commit()


def write_files(root: Path, writes: Mapping[str, bytes | str | None]) -> None:
    """Write every file of ``writes`` under ``root`` atomically (None: delete it)."""
    with staged(root) as staging:
        for rel, data in writes.items():
            staging.write(rel, data)


def write_tree(dest: Path, files: Mapping[str, str], base: Path | None = None) -> None:
    """Replace ``dest`` by ``base`` (copied, if given) overlaid with ``files``, atomically."""
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new-", dir=dest.parent))
    try:
        if base is not None:
            os.rmdir(staging)
            # a Megatron-LM checkout's history is not part of the fork
            shutil.copytree(base, staging, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        for name, text in files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="")
        _swap_into_place(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_into_place(staging: Path, dest: Path) -> None:
    backup = None
    if dest.exists():
        backup = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.rmdir(backup)
        os.rename(dest, backup)
    try:
        os.rename(staging, dest)
    except BaseException:
        if backup is not None:
            os.rename(backup, dest)
        raise
    if backup is not None:
        shutil.rmtree(backup)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
