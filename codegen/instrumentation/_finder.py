"""The import hook: serve the instrumented text of exactly the megatron modules whose bytes match a
supported megatron-core release, and the telemetry runtime as ``megatron.core.otel``.

A module named in the table is found as usual by the finders after this one (site-packages, a
checkout on ``PYTHONPATH``, ...); then its file is hashed:

- the bytes of a supported release's pristine file: compiled from the instrumented text shipped in
  this package (bytecode cached under this package, or the user's cache when that is read-only);
  ``__file__`` stays the file's own path, tracebacks and ``inspect.getsource`` show the
  instrumented lines (registered with ``linecache`` and returned by the loader's ``get_source``);
- the bytes of an instrumented file (the fork, the patches applied), or a file that already
  imports the runtime (``from megatron.core import otel``, ``import megatron.core.otel as
  _otel``; a tree in dependency mode, its shim the runtime): left alone, it is woven already;
- anything else: left alone, with one warning naming the file, the release its
  ``package_info.py`` says and what to do;
- a tree carrying Megatron-LM's own hand-written instrumentation (PR #6438: its span sites in
  ``megatron/training/training.py``) that this package was built over (``codegen package
  --source DIR --replace-upstream``: the table's "replaced" trees): when every file under
  ``megatron/`` the table names for that tree has its pristine bytes, the tree is known and each
  such module is served its replaced text (#6438 taken out, the specs' instrumentation in, computed
  when the package was built), with the runtime shipped here;
- every module of any other tree carrying #6438's instrumentation: left alone, even a file that
  matches a release, so that a process never runs two sets of spans; one warning per tree names
  the command that replaces it (``codegen apply ... --replace-upstream``).

``megatron.core.otel`` is the runtime shipped here only when the tree has none of its own.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import linecache
import marshal
import os
import re
import shlex
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from ._package_info import tree_release

HERE = Path(__file__).resolve().parent
RUNTIME_MODULE = "megatron.core.otel"
PACKAGE_INFO_MODULE = "megatron.core.package_info"
# a module that imports the runtime is instrumented already (a fork of another spec version, say)
_IMPORTS_RUNTIME = re.compile(
    rb"^\s*(?:from megatron\.core import [^\n]*\botel\b|import megatron\.core\.otel\b)", re.MULTILINE
)


class NotWovenWarning(UserWarning):
    """A megatron file matches no supported release: it runs as it is, without its spans."""


class HandWrittenTelemetryWarning(UserWarning):
    """The tree carries Megatron-LM's hand-written instrumentation: nothing in it is woven."""


# What emits spans in Megatron-LM's hand-written instrumentation (PR #6438), as the generator's
# refusal reads it (codegen/upstream.py); #6415's base layer alone (megatron/core/telemetry/) is
# not instrumentation.
_HAND_WRITTEN = re.compile(
    rb"\b_otel_managed_span\s*\(|@\s*_otel_trace_fn\s*\(|\b_otel_sg_enabled\s*\(|^[ \t]*def _\w*otel_\w*\s*\(",
    re.MULTILINE,
)
_TRAINING = Path("megatron") / "training" / "training.py"


def load_table() -> dict[str, Any]:
    with (HERE / "_table.json").open(encoding="utf-8") as handle:
        table: dict[str, Any] = json.load(handle)
    return table


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _release_of(origin: Path) -> str | None:
    """The release the tree's ``megatron/core/package_info.py`` says (parsed, never executed)."""
    parts = Path(origin).parts
    if "megatron" not in parts:
        return None
    return _tree_release(str(Path(*parts[: len(parts) - 1 - parts[::-1].index("megatron")])))


@functools.lru_cache(maxsize=16)
def _tree_release(root: str) -> str | None:
    return tree_release(Path(root))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _bytecode_dirs() -> list[Path]:
    dirs = [HERE / "__pycache__" / "woven"]
    explicit = os.environ.get("MEGATRON_OTEL_BYTECODE_DIR")
    if explicit:
        return [Path(explicit)]
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    dirs.append(Path(xdg) / "megatron-otel-instrumentation")
    return dirs


class WovenLoader(importlib.abc.InspectLoader):
    """Executes the instrumented text of ``origin`` (whose pristine bytes matched ``woven``)."""

    def __init__(self, fullname: str, origin: str, woven: str, is_package: bool) -> None:
        self.name = fullname
        self.path = origin
        self.woven = woven  # the instrumented text's sha256: its file and its bytecode's key
        self._is_package = is_package

    def is_package(self, fullname: str) -> bool:
        return self._is_package

    def get_filename(self, fullname: str) -> str:
        return self.path

    def get_source(self, fullname: str) -> str:
        return (HERE / "woven" / f"{self.woven}.pysrc").read_bytes().decode("utf-8")

    def get_code(self, fullname: str) -> CodeType:
        source = self.get_source(fullname)
        self._register_lines(source)
        name = f"{self.woven[:32]}.{sys.implementation.cache_tag}.pyc"
        magic = importlib.util.MAGIC_NUMBER
        for directory in _bytecode_dirs():
            try:
                data = (directory / name).read_bytes()
            except OSError:
                continue
            if data.startswith(magic):
                try:
                    code = marshal.loads(data[len(magic) :])
                except (EOFError, ValueError, TypeError):
                    continue
                if isinstance(code, CodeType) and code.co_filename == self.path:
                    return code
        code = compile(source, self.path, "exec", dont_inherit=True)
        if not sys.dont_write_bytecode:
            self._store(name, magic + marshal.dumps(code))
        return code

    def _store(self, name: str, data: bytes) -> None:
        for directory in _bytecode_dirs():
            try:
                directory.mkdir(parents=True, exist_ok=True)
                tmp = directory / f".{name}.{os.getpid()}.tmp"
                tmp.write_bytes(data)
                os.replace(tmp, directory / name)
                return
            except OSError:
                continue

    def _register_lines(self, source: str) -> None:
        """Tracebacks and ``inspect`` read lines through ``linecache``, which would read the
        pristine file from disk: give it the instrumented lines, stamped with the file's own size
        and mtime so ``linecache.checkcache`` keeps them."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return
        linecache.cache[self.path] = (stat.st_size, stat.st_mtime, source.splitlines(True), self.path)

    def exec_module(self, module: ModuleType) -> None:
        exec(self.get_code(module.__name__), module.__dict__)  # noqa: S102  # the module's own code


class MegatronFinder(importlib.abc.MetaPathFinder):
    """Placed first on ``sys.meta_path`` by :func:`install`."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table
        # module name -> {pristine sha256: {release: instrumented sha256}}; every instrumented sha256
        self.modules: dict[str, dict[str, dict[str, str]]] = {}
        self.woven: set[str] = set()
        for path, entries in table["files"].items():
            module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            for entry in entries:
                self.modules.setdefault(module, {}).setdefault(entry["pristine"], {})[entry["release"]] = (
                    entry["woven"]
                )
                self.woven.add(entry["woven"])
        self.warned: set[str] = set()
        self.served: dict[str, str] = {}  # module -> the release whose pristine file it matched
        self.hand_written: dict[Path, bool] = {}  # tree root -> carries #6438's instrumentation
        # the #6438 trees this package was built over: label -> {path: pristine sha256}
        self.replaced: dict[str, dict[str, str]] = {label: {} for label in table.get("replaced", [])}
        for path, entries in table["files"].items():
            for entry in entries:
                if entry["release"] in self.replaced:
                    self.replaced[entry["release"]][path] = entry["pristine"]
        self.replaced_pristine = {sha for files in self.replaced.values() for sha in files.values()}
        self.known_trees: dict[Path, str] = {}  # tree root -> the replaced tree it matches

    def _others(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if isinstance(spec, importlib.machinery.ModuleSpec):
                return spec
        return None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == RUNTIME_MODULE:
            return self._runtime_spec(fullname, path, target)
        known = self.modules.get(fullname)
        if known is None:
            return None
        spec = self._others(fullname, path, target)
        if spec is None or not spec.has_location or not spec.origin:
            return spec
        try:
            data = Path(spec.origin).read_bytes()
        except OSError:
            return spec
        root = _tree_root(fullname, Path(spec.origin))
        if root is not None and self._hand_written(root, data):
            return spec
        digest = _sha256(data)
        by_release = known.get(digest)
        woven = None
        if by_release:
            # the same pristine file in several releases: the instrumentation of the tree's own
            # release (its specs may differ per release), else of the newest that has it
            release = self.known_trees.get(root) if root is not None else None
            release = release or _release_of(Path(spec.origin))
            published = [r for r in by_release if r not in self.replaced] or list(by_release)
            woven = by_release.get(release or "") or by_release[max(published, key=_version_key)]
        if woven is None:
            if digest not in self.woven and not _IMPORTS_RUNTIME.search(data):
                self._warn(spec.origin, root)
            return spec
        is_package = spec.submodule_search_locations is not None
        loader = WovenLoader(fullname, spec.origin, woven, is_package)
        served = importlib.util.spec_from_file_location(
            fullname, spec.origin, loader=loader, submodule_search_locations=spec.submodule_search_locations
        )
        if served is not None:
            served.cached = None  # the bytecode is this package's, never beside the pristine file
            self.served[fullname] = digest
        return served

    def _runtime_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        own = self._others(fullname, path, target)
        if own is not None:  # the tree carries a runtime (a fork, the patches applied): it is used
            return own
        release = None
        package_info = sys.modules.get(PACKAGE_INFO_MODULE)
        origin = getattr(package_info, "__file__", None)
        if origin is None:
            for entry in path or ():
                candidate = Path(entry) / "package_info.py"
                if candidate.is_file():
                    origin = str(candidate)
                    break
        if origin is not None:
            release = _release_of(Path(origin))
        runtimes: dict[str, str] = self.table["runtime"]
        key = runtimes.get(release or "") or runtimes[self.table["newest"]]
        init = HERE / "runtime" / key / "__init__.py"
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[str(init.parent)]
        )

    def _hand_written(self, root: Path, data: bytes) -> bool:
        """Whether the tree at ``root`` carries hand-written instrumentation (read once per tree,
        from its training.py, or the module at hand); the first time, one warning says so."""
        known = self.hand_written.get(root)
        if known is None:
            try:
                training = (root / _TRAINING).read_bytes()
            except OSError:
                training = b""
            known = bool(_HAND_WRITTEN.search(training))
            if known and self._known_tree(root):
                known = False  # its every #6438 module is served replaced
            self.hand_written[root] = known
            if known:
                warnings.warn(
                    f"{root}: not instrumented: the tree carries Megatron-LM's own hand-written "
                    "OpenTelemetry instrumentation (PR #6438, turned on with --otel-enabled), and "
                    "weaving it would emit its spans twice; every module of it runs as it is. To use "
                    "this instrumentation instead, replace it in the checkout (a git checkout): "
                    f"`{self._apply(root, '--in-place', '--replace-upstream')}` (or --out DIR for a fork).",
                    HandWrittenTelemetryWarning,
                    stacklevel=3,
                )
        if not known and _HAND_WRITTEN.search(data) and _sha256(data) not in self.replaced_pristine:
            self.hand_written[root] = True
            return self._hand_written_module(root)
        return known

    def _known_tree(self, root: Path) -> bool:
        """Whether every module under ``megatron/`` of a #6438 tree this package was built over has
        its pristine bytes at ``root`` (then each is served replaced; the entry scripts, never
        imported as modules, are not read)."""
        for label, files in self.replaced.items():
            modules = {path: sha for path, sha in files.items() if path.startswith("megatron/")}
            try:
                if modules and all(
                    _sha256((root / path).read_bytes()) == sha for path, sha in modules.items()
                ):
                    self.known_trees[root] = label
                    return True
            except OSError:
                continue
        return False

    def _hand_written_module(self, root: Path) -> bool:
        warnings.warn(
            f"{root}: not instrumented: a module of it carries hand-written OpenTelemetry spans "
            "(Megatron-LM's own, PR #6438); every module of the tree runs as it is. Replace it with "
            f"`{self._apply(root, '--in-place', '--replace-upstream')}`.",
            HandWrittenTelemetryWarning,
            stacklevel=3,
        )
        return True

    def _apply(self, root: Path | None, *options: str) -> str:
        """The ``codegen apply`` command for the tree at ``root``: the codegen and the specs this
        package was built with (``codegen package``) where they are on this machine, else
        ``codegen`` and ``SPECS`` for the user's."""
        built: dict[str, str] = self.table.get("built_from", {})
        program = built.get("codegen", "")
        specs = built.get("specs", "")
        words = [program if program and Path(program).is_file() else "codegen", "apply"]
        words.append(specs if specs and Path(specs).exists() else "SPECS")
        words += ["--source", str(root) if root is not None else "TREE", *options]
        return " ".join(shlex.quote(word) if word != "SPECS" else word for word in words)

    def _warn(self, origin: str, root: Path | None = None) -> None:
        if origin in self.warned:
            return
        self.warned.add(origin)
        release = _release_of(Path(origin))
        fork = f"{root}-otel" if root is not None else "FORK"
        said = f"megatron-core {release}" if release else "an unknown release (package_info.py unreadable)"
        supported = ", ".join(self.table["releases"])
        warnings.warn(
            f"{origin}: not instrumented: its bytes match no megatron-core release this "
            f"instrumentation supports ({supported}); the tree says it is {said}. It runs unchanged, "
            "without its spans. To instrument a tree of your own, make its instrumented fork with "
            f"`{self._apply(root, '--out', fork)}` (or install a supported release).",
            NotWovenWarning,
            stacklevel=2,
        )


def _tree_root(fullname: str, origin: Path) -> Path | None:
    """The directory holding ``megatron/`` for the module ``fullname`` found at ``origin``."""
    depth = fullname.count(".") + (1 if origin.name == "__init__.py" else 0)
    parents = origin.resolve().parents
    return parents[depth] if depth < len(parents) else None


_FINDER: MegatronFinder | None = None


def install() -> MegatronFinder:
    """Put the finder first on ``sys.meta_path`` (once); later imports of megatron are woven."""
    global _FINDER
    if _FINDER is None:
        _FINDER = MegatronFinder(load_table())
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return _FINDER


def uninstall() -> None:
    """Take the finder off ``sys.meta_path``: modules imported later are the files as they are."""
    while _FINDER is not None and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def installed() -> bool:
    return _FINDER is not None and _FINDER in sys.meta_path
