"""Git-compatible unified diffs (``git apply`` / ``patch -p1``) and quilt patch sets."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence

DEFAULT_CONTEXT = 3
FILE_MODE = "100644"
SERIES_FILE = "series"

_NO_EOL = "\\ No newline at end of file\n"
# Characters git would C-quote in a path; we refuse them rather than quote.
_UNQUOTABLE = re.compile(r'[\x00-\x1f\x7f"\\]|[^\x00-\x7f]')


def make_patch(path: str, old: str | None, new: str | None, context: int = DEFAULT_CONTEXT) -> str:
    """Return a ``diff --git`` patch turning ``old`` into ``new`` at ``path``.

    ``old is None`` creates the file, ``new is None`` deletes it; "" when nothing changes.
    """
    if old == new:
        return ""
    _check_path(path)
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    header = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        header.append(f"new file mode {FILE_MODE}\n")
    elif new is None:
        header.append(f"deleted file mode {FILE_MODE}\n")
    old_lines = split_lines(old or "")
    new_lines = split_lines(new or "")
    if not old_lines and not new_lines:
        # Creating or deleting an empty file: git writes neither ---/+++ lines nor hunks.
        return "".join(header)
    header.append(_file_line("---", "/dev/null" if old is None else f"a/{path}"))
    header.append(_file_line("+++", "/dev/null" if new is None else f"b/{path}"))
    return "".join(header) + "".join(_hunks(old_lines, new_lines, context))


def write_patch_set(patches: Mapping[str, str]) -> dict[str, str]:
    """Map ``path -> patch`` to quilt files: ``NNNN-<path>.patch`` in path order plus ``series``.

    Empty patches (unchanged files) are left out.
    """
    files: dict[str, str] = {}
    series: list[str] = []
    for number, path in enumerate(sorted(p for p, text in patches.items() if text), start=1):
        _check_path(path)
        name = f"{number:04d}-{path.replace('/', '-')}.patch"
        files[name] = patches[path]
        series.append(name)
    files[SERIES_FILE] = "".join(f"{name}\n" for name in series)
    return files


def split_lines(text: str) -> list[str]:
    """Split on "\\n" only, keeping terminators, as git does (``\\r``, ``\\f`` stay inside lines)."""
    lines = [line + "\n" for line in text.split("\n")]
    last = lines.pop()
    if last != "\n":
        lines.append(last[:-1])
    return lines


def _check_path(path: str) -> None:
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        or _UNQUOTABLE.search(path)
    ):
        raise ValueError(f"not a plain relative POSIX path: {path!r}")


def _file_line(marker: str, name: str) -> str:
    # git appends a tab to a ---/+++ name containing a space so readers find its end.
    return f"{marker} {name}{chr(9) if ' ' in name else ''}\n"


def _hunks(old: Sequence[str], new: Sequence[str], context: int) -> Iterator[str]:
    # get_grouped_opcodes splits where unchanged runs exceed 2*context lines, as git does.
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        old_range = _range(group[0][1], group[-1][2])
        new_range = _range(group[0][3], group[-1][4])
        yield f"@@ -{old_range} +{new_range} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from _body(" ", old[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from _body("-", old[i1:i2])
            if tag in ("replace", "insert"):
                yield from _body("+", new[j1:j2])


def _range(start: int, stop: int) -> str:
    """Format a 0-based [start, stop) line range the way git's hunk headers do."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    if length == 0:
        return f"{start},0"
    return f"{start + 1},{length}"


def _body(prefix: str, lines: Sequence[str]) -> Iterator[str]:
    for line in lines:
        if line.endswith("\n"):
            yield prefix + line
        else:
            yield prefix + line + "\n" + _NO_EOL
