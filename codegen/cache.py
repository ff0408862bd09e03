"""Remember the outputs of a successful run, keyed by everything they depend on.

An unchanged second ``codegen apply`` then costs a few file reads and hashes instead of parsing
megatron-core again. Stdlib only: the CLI consults it before importing libcst (0.4 s by itself).

The key covers the generator's own sources (the runtime package ``codegen/otel_runtime/``, copied
into the fork, among them) and templates, every spec file, and the source tree:
for the pinned release, its unpacked cache directory (immutable once complete, and named by the
pin, which the spec bytes already cover); for ``--source DIR``, the size and mtime of every
Python file under it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from codegen.atomic import write_files
from codegen.emit.runtime import VENDORED
from codegen.emit.templating import TEMPLATES_DIR
from codegen.upstream import REPLACE_FLAG, default_cache_dir

PACKAGE = Path(__file__).resolve().parent
FORMAT = 2
KEEP = 16  # results kept; older ones are removed when a new one is stored


@dataclass(frozen=True)
class RunOptions:
    """What a generation depends on besides the files it reads (``pipeline.generate``'s
    arguments): the key of its result, with those files' state."""

    specs: Path
    source: Path | None = None
    release: str | None = None
    allow_missing: bool = False
    replace_upstream: bool = False
    runtime: str = VENDORED  # codegen.emit.runtime.RUNTIME_MODES
    served: bool = False  # for the wheel's served trees: see pipeline.generate

    def key_text(self) -> str:
        """The options as the key sees them; the notes and warnings name spec files as seen from
        where this run is, so that path is part of it."""
        from codegen.spec.load import display_path

        text = (
            f"release {self.release}\nallow_missing {self.allow_missing}\nspecs as {display_path(self.specs)}"
        )
        text += f"\n{REPLACE_FLAG}" if self.replace_upstream else ""
        text += f"\nruntime {self.runtime}" if self.runtime != VENDORED else ""
        return text + ("\nserved" if self.served else "")


@dataclass(frozen=True)
class CachedRun:
    source_root: str
    tree: dict[str, str]  # generated/: patches and docs
    changes: dict[str, str]  # path under the source root -> new text (the fork's overlay)
    spans: int
    files: int
    # path under the source root -> [size, mtime_ns] of every file the run read there
    inputs: dict[str, list[int]] = field(default_factory=dict)
    release: str = ""  # the megatron-core release of the tree
    pinned: bool = True  # the tree is the pinned release's wheel (generated/ belongs to it)
    notes: list[str] = field(default_factory=list)  # entries the specs exclude from this release
    warnings: list[str] = field(default_factory=list)  # entries --allow-missing left out
    missing: int = 0  # how many entries were left out
    report: str = ""  # what was placed, excluded and left out (written into a fork)


def results_dir() -> Path:
    return default_cache_dir() / "results"


def run_key(options: RunOptions) -> str | None:
    """The key of a run, or None when an input cannot be read (then the run just happens)."""
    spec_dir, source = options.specs, options.source
    digest = hashlib.sha256(f"format {FORMAT}\n{options.key_text()}\n".encode())
    try:
        for root, pattern in ((PACKAGE, "*.py"), (TEMPLATES_DIR, "*.j2")):
            for path in sorted(root.rglob(pattern)):
                _add_file(digest, path, root)
        specs = (
            [spec_dir]
            if spec_dir.is_file()
            else sorted(p for p in spec_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        )
        for path in specs:
            _add_file(digest, path, spec_dir)
        digest.update(_versions().encode())
        if source is None:
            digest.update(b"pinned release\n")
        else:
            digest.update(f"source {source.resolve()}\n".encode())
            named = {source / name for name in _named_files(specs)}
            for path in sorted(set((source / "megatron").rglob("*.py")) | named):
                stat = path.stat() if path.exists() else None
                state = f"{stat.st_size} {stat.st_mtime_ns}" if stat else "missing"
                digest.update(f"{path.relative_to(source)} {state}\n".encode())
    except (OSError, ValueError):
        return None
    return digest.hexdigest()


def _versions() -> str:
    """The libraries whose behaviour shapes the output."""
    from importlib.metadata import PackageNotFoundError, version

    parts = [sys.version]
    for name in ("libcst", "Jinja2", "PyYAML"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} ?")
    return "\n".join(parts) + "\n"


_FILE_KEY = re.compile(r"^\s*(?:-\s*)?file:\s*['\"]?([^'\"#\s]+)", re.MULTILINE)


def _named_files(specs: list[Path]) -> set[str]:
    """Every ``file:`` the specs name, found textually (yaml is not imported on this path)."""
    return {m.group(1) for path in specs for m in _FILE_KEY.finditer(path.read_text(encoding="utf-8"))}


def _add_file(digest: hashlib._Hash, path: Path, root: Path) -> None:
    digest.update(f"{path.relative_to(root) if path != root else path.name}\n".encode())
    digest.update(hashlib.sha256(path.read_bytes()).digest())


def input_state(root: Path, paths: list[str]) -> dict[str, list[int]]:
    state: dict[str, list[int]] = {}
    for rel in paths:
        stat = (root / rel).stat()
        state[rel] = [stat.st_size, stat.st_mtime_ns]
    return state


def load(key: str) -> CachedRun | None:
    """A stored run whose every input file is still as it was, or None."""
    try:
        data = json.loads((results_dir() / f"{key}.json").read_text(encoding="utf-8"))
        run = CachedRun(**data)
        root = Path(run.source_root)
        if not root.is_dir() or input_state(root, list(run.inputs)) != run.inputs:
            return None
    except (OSError, ValueError, TypeError):
        return None
    return run


def store(key: str, run: CachedRun) -> None:
    """Write atomically; a cache that cannot be written is not an error."""
    directory = results_dir()
    try:
        write_files(directory, {f"{key}.json": json.dumps(run.__dict__)})
        results = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in results[KEEP:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
