"""In-tree mode: the specs live in a Megatron-LM checkout and the instrumented code is committed there.

``codegen apply SPECS --source CHECKOUT --in-place`` strips this project's instrumentation from the
checkout's files (the pipeline does that for any instrumented tree), applies the specs, and writes
back only the files whose bytes change: each atomically, its mode and line endings kept. The
runtime package is written into the tree, and with ``--docs DIR`` the taxonomy pages too. With
``--check`` nothing is written: the diff between the checkout and what the specs give is printed
and the exit status is 1 when they differ (the CI and pre-commit check).

A manifest beside the runtime (``<runtime package>/_in_place.json``) records what the last run
wrote: per instrumented file a fingerprint of each block of generated lines, per wholly generated
file (runtime, docs) its sha256. It serves two guards, both checked before anything is written:

- **hand edits**: a block of generated lines that no longer matches its fingerprint (a span name
  changed in the code, a deleted ``_otel_span and _otel_span.end()``), or a runtime/docs file
  edited, is reported as ``path:line: error: ...`` and the run refused, unless
  ``--discard-hand-edits``;
- **uncommitted work**: a file to be written whose bytes are neither committed in git nor exactly
  what the last run wrote is refused (one line naming it) unless ``--allow-dirty``. Outside git
  nothing is committed, so a first run there is refused; ``--allow-dirty`` overwrites (nothing is
  kept beside the files), and later runs go ahead on files the manifest says are ours.

The manifest is bookkeeping, not output: ``--check`` leaves it out of the comparison.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst

from codegen.cache import RunOptions
from codegen.spec.model import Hook
from codegen.strip import strip_all, strip_generated

MANIFEST_NAME = "_in_place.json"
MANIFEST_FORMAT = "megatron-otel-codegen in-place manifest 1"


class InPlaceError(Exception):
    """A problem with the checkout or the options, one line for users."""


@dataclass(frozen=True)
class HandEdit:
    path: str
    line: int
    message: str

    def render(self, severity: str = "error") -> str:
        return f"{self.path}:{self.line}: {severity}: {self.message}"


@dataclass
class InPlace:
    """What an in-place run would do to the checkout rooted at ``root``."""

    root: Path
    manifest_path: str
    current: dict[str, bytes | None]  # on disk now, for every path the run manages
    wanted: dict[str, bytes | None]  # what the specs give (None: the file goes)
    hand_edits: list[HandEdit] = field(default_factory=list)
    recorded: dict[str, str] = field(default_factory=dict)  # path -> sha256 the last run wrote
    # the files that carry generated code after the run (instrumented sources, the runtime, the
    # docs): the one count both the run and ``--check`` give
    generated: frozenset[str] = frozenset()

    def writes(self, manifest: bool = True) -> dict[str, bytes | None]:
        """The paths whose bytes change, with their new bytes (None: delete)."""
        return {
            path: new
            for path, new in sorted(self.wanted.items())
            if new != self.current.get(path) and (manifest or path != self.manifest_path)
        }

    def diff(self) -> str:
        chunks: list[str] = []
        for path, new in self.writes(manifest=False).items():
            old = self.current.get(path)
            chunks.extend(
                difflib.unified_diff(
                    _text(old).splitlines(keepends=True),
                    _text(new).splitlines(keepends=True),
                    f"a/{path}" if old is not None else "/dev/null",
                    f"b/{path}" if new is not None else "/dev/null",
                )
            )
            if chunks and not chunks[-1].endswith("\n"):
                chunks[-1] += "\n\\ No newline at end of file\n"
        return "".join(chunks)

    def sizes(self) -> list[tuple[str, int, int]]:
        """(path, lines added, lines removed) of every file that changes: ``git diff --numstat``'s
        figures (what a reviewer sees), difflib's where git is not installed."""
        writes = self.writes(manifest=False)
        counted = _git_numstat(self.current, writes) if shutil.which("git") else None
        out = []
        for path, new in writes.items():
            if counted is not None and path in counted:
                out.append((path, *counted[path]))
                continue
            added = removed = 0
            matcher = difflib.SequenceMatcher(
                None, _lines(_text(self.current.get(path))), _lines(_text(new)), autojunk=False
            )
            for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                if tag != "equal":
                    removed += i2 - i1
                    added += j2 - j1
            out.append((path, added, removed))
        return out


def _git_numstat(
    current: dict[str, bytes | None], writes: dict[str, bytes | None]
) -> dict[str, tuple[int, int]] | None:
    """``git diff --no-index --numstat`` of the files before and after, or None when git fails."""
    with tempfile.TemporaryDirectory(prefix="codegen-numstat-") as scratch:
        for side, files in (("a", {p: current.get(p) for p in writes}), ("b", writes)):
            for path, data in files.items():
                if data is not None:
                    target = Path(scratch, side, path)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
            Path(scratch, side).mkdir(exist_ok=True)
        result = subprocess.run(
            ["git", "diff", "--no-index", "--no-renames", "--numstat", "-z", "a", "b"],
            cwd=scratch,
            capture_output=True,
            check=False,
        )
    if result.returncode not in (0, 1):
        return None
    counted: dict[str, tuple[int, int]] = {}
    # -z with two trees: "ADDED\tREMOVED\t" NUL "a/PATH or /dev/null" NUL "b/PATH or /dev/null" NUL
    fields = [os.fsdecode(f) for f in result.stdout.split(b"\0")]
    for k, record in enumerate(fields):
        numbers = re.fullmatch(r"(\d+)\t(\d+)\t", record)
        if numbers and k + 2 < len(fields):
            before, after = fields[k + 1], fields[k + 2]
            name = (after if after != "/dev/null" else before).split("/", 1)[1]
            counted[name] = (int(numbers[1]), int(numbers[2]))
    return counted


# -- what a run would do ----------------------------------------------------------------------


def prepare(options: RunOptions, docs: Path | None = None, check: bool = False) -> InPlace:
    """Generate as ``options`` say (``options.source``: the checkout) and work out what changes in
    the checkout (with ``check``, the manifest is left as it is; with ``replace_upstream``,
    Megatron-LM's hand-written instrumentation goes too, also from files the specs do not
    instrument; ``runtime``: the runtime copied in, or the import shim of dependency mode, see
    ``generate()``)."""
    from codegen.emit.runtime import PYPROJECT, render_runtime
    from codegen.pipeline import generate

    generation = generate(**asdict(options))
    root = generation.source_root.resolve()
    project = generation.project
    package = project.runtime.package.strip("/")
    alias = project.runtime.alias
    manifest_path = f"{package}/{MANIFEST_NAME}"
    docs_prefix = _docs_prefix(root, docs, package) if docs is not None else None
    old = _read_manifest(root, manifest_path)
    old_sources: dict[str, list[str]] = old.get("sources", {})
    old_files: dict[str, str] = old.get("files", {})

    wanted_text: dict[str, str | None] = {}
    stripped: dict[str, str] = {}  # instrumented file -> its text without the generator's constructs
    current_text: dict[str, str] = {}  # the same files as they are now
    for path, file_plan in generation.plan.files.items():
        stripped[path] = file_plan.module.code
        current_text[path] = file_plan.source
        change = generation.changes.get(path)
        wanted_text[path] = change[1] if change is not None else file_plan.source
    for path in generation.replaced:  # stripped of upstream's instrumentation, nothing instrumented
        if path not in stripped:
            wanted_text[path] = generation.changes[path][1]
    if PYPROJECT in generation.changes:  # dependency mode: the otel extra names the runtime package
        wanted_text[PYPROJECT] = generation.changes[PYPROJECT][1]
    for path in sorted(set(old_sources) - set(stripped)):
        # instrumented by an earlier run, no entry of the specs left in it: strip it whole
        text = _read_text(root / path)
        if text is not None:
            current_text[path] = text
            try:
                stripped[path] = strip_all(text, project.runtime.alias, project.runtime.parent_module)
            except cst.ParserSyntaxError as exc:
                raise InPlaceError(
                    f"{path}: cannot parse it (instrumented by an earlier run, no spec entry left in it): "
                    f"{exc.message}"
                ) from None
            wanted_text[path] = stripped[path]
    generated: dict[str, str] = dict(render_runtime(project, options.runtime))
    if docs_prefix is not None:
        generated.update({f"{docs_prefix}{name}": text for name, text in generation.docs.items()})
    for path, text in generated.items():
        wanted_text[path] = _like_existing(root / path, text)
    for path in old_files:
        wanted_text.setdefault(path, None)  # written by an earlier run, not any more: it goes

    wanted = {p: None if t is None else t.encode("utf-8") for p, t in wanted_text.items()}
    current = {p: _read_bytes(root / p) for p in wanted}
    current[manifest_path] = _read_bytes(root / manifest_path)
    edits: list[HandEdit] = []
    if old:
        for path, recorded in sorted(old_sources.items()):
            if path in current_text:
                edits += _source_edits(
                    path, stripped[path], current_text[path], recorded, wanted_text[path], alias
                )
        for path, digest in sorted(old_files.items()):
            now = current.get(path)
            if now is not None and _sha256(now) != digest:
                edits.append(_file_edit(path, now, wanted.get(path)))
    # an edit the specs now give as well (the change moved into the specs) loses nothing: the file
    # is already what the run would write
    edits = [e for e in edits if current.get(e.path) != wanted.get(e.path)]
    recorded_hashes = {**old_files, **old.get("written", {})}
    if check:
        wanted[manifest_path] = current[manifest_path]
    else:
        # fingerprints against the written text stripped as the next run will strip it (a line the
        # codemod re-wrapped stays re-wrapped there)
        hooks: dict[str, list[Hook]] = {}
        for hook in project.hooks:
            hooks.setdefault(hook.file, []).append(hook)
        base = {
            path: text
            if wanted_text[path] == current_text[path]
            else strip_generated(
                wanted_text[path] or "", alias, project.runtime.parent_module, hooks.get(path, [])
            )
            for path, text in stripped.items()
        }
        wanted[manifest_path] = _manifest(base, wanted_text, generated, alias).encode("utf-8")
    carrying = {p for p, text in stripped.items() if wanted_text[p] not in (None, text)}
    carrying |= {p for p in generated if wanted_text[p] is not None}
    return InPlace(root, manifest_path, current, wanted, edits, recorded_hashes, frozenset(carrying))


def _docs_prefix(root: Path, docs: Path, package: str) -> str:
    target = docs.resolve()
    if not target.is_relative_to(root) or target == root:
        raise InPlaceError(f"--docs {docs}: not a folder inside the checkout {root}")
    rel = target.relative_to(root).as_posix()
    if (rel + "/").startswith(package + "/") or package.startswith(rel + "/"):
        raise InPlaceError(f"--docs {docs}: overlaps the runtime package {package}")
    return rel + "/"


def _read_manifest(root: Path, manifest_path: str) -> dict[str, Any]:
    path = root / manifest_path
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InPlaceError(f"{path}: not a manifest written by codegen ({exc}); delete it to start afresh")
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise InPlaceError(
            f"{path}: not a manifest written by this version of codegen; delete it to start afresh"
        )
    return data


def _manifest(
    stripped: dict[str, str], wanted: dict[str, str | None], generated: dict[str, str], alias: str
) -> str:
    sources = {}
    written = {}
    for path in sorted(stripped):
        text = wanted[path]
        assert text is not None
        hunks = _fingerprints(_hunks(stripped[path], text, alias))
        if hunks:
            sources[path] = hunks
            written[path] = _sha256(text.encode("utf-8"))
    files = {
        path: _sha256(t.encode("utf-8")) for path in sorted(generated) if (t := wanted[path]) is not None
    }
    data = {"format": MANIFEST_FORMAT, "sources": sources, "files": files, "written": written}
    note = "Written by `codegen apply --in-place`: what it generated, to find hand edits. Do not edit."
    return json.dumps({"note": note, **data}, indent=1, sort_keys=False) + "\n"


# -- hand edits -------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").split("\n")


Hunk = tuple[int, int, int, int, str | None]  # final j1, j2; stripped i1, i2; fingerprint


def _hunks(stripped: str, final: str, alias: str) -> list[Hunk]:
    """Each block of lines of ``final`` that ``stripped`` has not, re-indentation aside: (first
    line, end line of ``final``, first line, end line of ``stripped``, fingerprint), 0-based, ends
    exclusive. The block adding the runtime import has no fingerprint: the pipeline keeps the
    import when it strips a file, so it is in ``stripped`` from the second run on."""
    before = [line.strip() for line in _lines(stripped)]
    after = [line.strip() for line in _lines(final)]
    out: list[Hunk] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        digest = None
        if not _import_only(before[i1:i2], after[j1:j2], alias):
            text = "\n".join(["-" + line for line in before[i1:i2]] + ["+" + line for line in after[j1:j2]])
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        out.append((j1, j2, i1, i2, digest))
    return out


def _fingerprints(hunks: list[Hunk]) -> list[str]:
    return [digest for *_, digest in hunks if digest is not None]


def _import_only(removed: list[str], added: list[str], alias: str) -> bool:
    """The block only adds the runtime import (``import P.ALIAS as _ALIAS``; before the private
    name: ``from P import a, ALIAS`` or a line of its own)."""
    removed, added = [line for line in removed if line], [line for line in added if line]
    one_line = rf"from [\w.]+ import {alias}|import [\w.]+\.{alias} as _{alias}(  # noqa: E402)?"
    if len(added) == 1 and not removed and re.fullmatch(one_line, added[0]):
        return True

    def squash(lines: list[str]) -> str:
        return re.sub(r"[\s,()]", "", " ".join(lines))

    joined = " ".join(added)
    if not re.search(rf"\b{alias}\b", joined) or not all(
        line.startswith(("from ", "import ")) or re.fullmatch(r"[\w\s,()]*", line) for line in added
    ):
        return False
    return squash(removed) == squash([re.sub(rf"\b{alias}\b", "", joined, count=1)])


def _source_edits(
    path: str, stripped: str, current: str, recorded: list[str], wanted: str | None, alias: str
) -> list[HandEdit]:
    """Blocks of generated lines that differ from what the last run wrote."""
    now = [h for h in _hunks(stripped, current, alias) if h[4] is not None]
    ours = _fingerprints(now)
    if ours == recorded:
        return []
    regenerated = [h for h in _hunks(stripped, wanted, alias) if h[4] is not None] if wanted else []
    at_line = {i1: (j1, j2) for j1, j2, i1, _, _ in regenerated}
    current_lines, wanted_lines = _lines(current), _lines(wanted or "")

    def in_current(line: int) -> int:
        """The line of ``current`` that is line ``line`` of ``stripped``."""
        return line + sum(
            (j2 - j1) - (i2 - i1) for j1, j2, i1, i2, _ in _hunks(stripped, current, alias) if i2 <= line
        )

    edits = []
    matcher = difflib.SequenceMatcher(None, recorded, ours, autojunk=False)
    for tag, r1, r2, o1, o2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for j1, j2, i1, _, _ in now[o1:o2]:  # blocks not as written: the first line that differs
            line = j1
            if i1 in at_line:
                w1, w2 = at_line[i1]
                ours_block, theirs = current_lines[j1:j2], wanted_lines[w1:w2]
                offset = next(
                    (k for k, (a, b) in enumerate(zip(ours_block, theirs, strict=False)) if a != b), 0
                )
                line = j1 + min(offset, max(j2 - j1 - 1, 0))
            edits.append(HandEdit(path, line + 1, "generated lines edited by hand since the last apply"))
        for digest in recorded[r1:r2] if o1 == o2 else ():  # blocks removed whole: where they were
            found = next((h for h in regenerated if h[4] == digest), None)
            if found is None:
                line = now[o1][0] if o1 < len(now) else len(current_lines) - 1
                what = "a block of generated lines"
            else:
                line = in_current(found[2])
                first = next((x.strip() for x in wanted_lines[found[0] : found[1]] if x.strip()), "")
                what = f"'{first}'"
            edits.append(HandEdit(path, line + 1, f"{what} removed by hand here since the last apply"))
    return edits


def _file_edit(path: str, now: bytes, wanted: bytes | None) -> HandEdit:
    """A wholly generated file that is not as the last run wrote it."""
    line = 1
    if wanted is not None:
        a, b = _lines(_text(now)), _lines(_text(wanted))
        line = next(
            (k + 1 for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
    return HandEdit(path, line, "generated file edited by hand since the last apply")


# -- the checkout -----------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", "surrogateescape")


def _read_bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _read_text(path: Path) -> str | None:
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", "surrogateescape")


def _like_existing(path: Path, text: str) -> str:
    """``text`` with the line endings of the file it replaces (CRLF kept)."""
    data = _read_bytes(path)
    if data is not None and data.find(b"\n") > 0 and data[data.find(b"\n") - 1 : data.find(b"\n")] == b"\r":
        return text.replace("\r\n", "\n").replace("\n", "\r\n")
    return text


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)


def uncommitted(root: Path, paths: list[str]) -> set[str] | None:
    """The ``paths`` (relative to ``root``) whose bytes git does not hold as committed: modified,
    staged, untracked or ignored; None when ``root`` is not in a git work tree."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        return None
    toplevel = Path(os.fsdecode(top.stdout.strip())).resolve()
    status = _git(
        root,
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignored=matching",
        "--no-renames",
        "--",
        *[str(root / p) for p in paths],
    )
    if status.returncode != 0:
        raise InPlaceError(f"git status in {root} failed: {os.fsdecode(status.stderr).strip()}")
    found: set[str] = set()
    for entry in status.stdout.split(b"\0"):
        if len(entry) > 3:
            absolute = (toplevel / os.fsdecode(entry[3:])).resolve()
            if absolute.is_relative_to(root):
                found.add(absolute.relative_to(root).as_posix())
    return found


def unsafe_to_overwrite(plan: InPlace, writes: dict[str, bytes | None]) -> list[str]:
    """One line per file the run would overwrite or delete that holds work nobody else has: bytes
    that are neither committed in git nor what the last run wrote."""
    existing = [p for p in writes if plan.current.get(p) is not None and p != plan.manifest_path]
    dirty = uncommitted(plan.root, existing)
    problems = []
    for path in existing:
        ours = _sha256(plan.current[path] or b"") == plan.recorded.get(path)
        if ours or (dirty is not None and path not in dirty):
            continue
        if dirty is None:
            problems.append(
                f"{path}: {plan.root} is not in a git work tree and the file is not as the last "
                "in-place run wrote it; commit the tree to git first (or use --out DIR for a fork)"
            )
        else:
            problems.append(f"{path}: has uncommitted changes; commit or stash them first")
    return problems
