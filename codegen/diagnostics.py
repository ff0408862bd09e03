"""Located diagnostics: every user-facing problem is reported as ``path:line:col: error: message``."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tomllib
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True, order=True)
class Pos:
    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"

    def ref(self, here: Pos) -> str:
        """How a message located at ``here`` names this position."""
        return f"line {self.line}" if self.path == here.path else str(self)


@dataclass(frozen=True, order=True)
class Diagnostic:
    pos: Pos
    message: str
    notes: tuple[str, ...] = ()
    severity: str = "error"  # or "warning": reported, but the run goes on

    def render(self) -> str:
        lines = [f"{self.pos}: {self.severity}: {self.message}"]
        lines.extend(f"    {note}" for note in self.notes)
        return "\n".join(lines)


@dataclass
class Diagnostics:
    """Collects every problem of a run so that all of them are reported at once."""

    items: list[Diagnostic] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)

    def error(self, pos: Pos, message: str, notes: tuple[str, ...] | list[str] = ()) -> None:
        self.items.append(Diagnostic(pos, message, tuple(notes)))

    def warning(self, pos: Pos, message: str, notes: tuple[str, ...] | list[str] = ()) -> None:
        self.warnings.append(Diagnostic(pos, message, tuple(notes), "warning"))

    def __bool__(self) -> bool:
        """Whether there are errors (warnings alone let the run go on)."""
        return bool(self.items)

    def render(self) -> str:
        return "\n".join(d.render() for d in sorted(set(self.items)))

    def render_warnings(self) -> list[str]:
        return [d.render() for d in sorted(set(self.warnings))]


@dataclass
class InFile(Diagnostics):
    """The diagnostics found in one source file, collected into another :class:`Diagnostics`:
    every message names the file (`` (path)`` is appended to one that does not)."""

    file: str = ""

    def _named(self, message: str) -> str:
        return message if self.file in message else f"{message} ({self.file})"

    def error(self, pos: Pos, message: str, notes: tuple[str, ...] | list[str] = ()) -> None:
        super().error(pos, self._named(message), notes)

    def warning(self, pos: Pos, message: str, notes: tuple[str, ...] | list[str] = ()) -> None:
        super().warning(pos, self._named(message), notes)


class SpecError(Exception):
    """Raised with every collected diagnostic; the CLI prints them and exits with code 2."""

    def __init__(self, diagnostics: Diagnostics) -> None:
        super().__init__(diagnostics.render())
        self.diagnostics = diagnostics


class PlacementError(Exception):
    """Entries reported placed that the generated code lacks: the generator's post-condition
    failed (a bug of the generator, not of the specs). Each problem is located at its entry's
    spec line; the CLI prints them and exits with code 4."""

    def __init__(self, problems: list[tuple[Pos, str]]) -> None:
        self.problems = tuple(sorted(problems))
        super().__init__("\n".join(f"{pos}: internal error: {message}" for pos, message in self.problems))


def program() -> str:
    """How to run this program again from where it ran: ``codegen`` when that is what the shell
    finds on PATH, else the path it was run by (``../megatron-otel-codegen/.venv/bin/codegen``)."""
    arg0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(arg0) != "codegen" or not os.path.exists(arg0):
        return "python -m codegen" if arg0.endswith(os.path.join("codegen", "__main__.py")) else "codegen"
    found = shutil.which("codegen")
    if found and os.path.samefile(found, arg0):
        return "codegen"
    return shlex.quote(arg0)


def program_path() -> str:
    """This program's console script as an absolute path (the one run, else the one beside this
    interpreter), or "" when there is none."""
    arg0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(arg0) == "codegen" and os.path.isfile(arg0):
        return os.path.abspath(arg0)
    found = shutil.which("codegen", path=os.path.dirname(sys.executable))
    return os.path.abspath(found) if found else ""


def rerun(argv: Sequence[str], drop: Sequence[str] = (), add: Sequence[str] = ()) -> str:
    """The command line that ran, as a command for the same directory: the program as invoked,
    its arguments as given less ``drop`` (options without a value), plus ``add``."""
    words = [word for word in argv if word not in drop] + [word for word in add if word not in argv]
    return " ".join([program(), *(shlex.quote(word) for word in words)])


DISTRIBUTION = "megatron-otel-codegen"
_EXTRA = re.compile(r"""^(?P<requirement>[^;]+);.*\bextra\s*==\s*["'](?P<extra>[^"']+)["']""")


def install_command(extra: str) -> str:
    """The pip command that adds the requirements of ``extra`` to the environment this program
    runs in, as it was installed: with the clone's ``constraints.txt`` (the pinned versions) when
    it was installed from a clone (editable or not) or runs from one; the extra's requirements as
    the installed metadata states them otherwise (a wheel). No distribution name is asked of an
    index: none serves this one."""
    requirements = _extra_requirements(extra)
    clone = source_tree()
    words = [_here(sys.executable), "-m", "pip", "install"]
    if clone is not None:
        words += ["-c", _here(str(clone / "constraints.txt"))]
    return " ".join(shlex.quote(word) for word in [*words, *requirements])


def source_tree() -> Path | None:
    """The clone this program was installed from or runs from (it holds pyproject.toml naming
    this distribution and constraints.txt), or None (installed from a wheel)."""
    candidates = [Path(__file__).resolve().parents[1]]
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        found = json.loads(text) if text else {}
    except (metadata.PackageNotFoundError, ValueError):
        found = {}
    url = found.get("url", "") if isinstance(found, dict) else ""
    if isinstance(url, str) and url.startswith("file://") and "dir_info" in found:
        candidates.insert(0, Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)))
    for root in candidates:
        try:
            project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if project.get("project", {}).get("name") == DISTRIBUTION and (root / "constraints.txt").is_file():
            return root
    return None


def _extra_requirements(extra: str) -> list[str]:
    """The requirements ``extra`` adds: from the installed metadata, else the clone's pyproject.toml."""
    try:
        listed = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        listed = []
    found = [m["requirement"].strip() for r in listed if (m := _EXTRA.match(r)) and m["extra"] == extra]
    if found:
        return found
    clone = source_tree()
    if clone is not None:
        project = tomllib.loads((clone / "pyproject.toml").read_text(encoding="utf-8"))
        return [str(r) for r in project["project"]["optional-dependencies"][extra]]
    raise LookupError(f"no extra {extra!r} in {DISTRIBUTION}'s metadata")


def _here(path: str) -> str:
    """``path`` relative to the working directory when it is below it, else as given."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path
