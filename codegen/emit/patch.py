"""Git-compatible unified diffs (``git apply`` / ``patch -p1``) and quilt patch sets."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal

DEFAULT_CONTEXT = 3
FILE_MODE = "100644"
SERIES_FILE = "series"

_Opcode = tuple[Literal["replace", "delete", "insert", "equal"], int, int, int, int]
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
    for group in _HeadTailMatcher(old, new).get_grouped_opcodes(context):
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


class _HeadTailMatcher(difflib.SequenceMatcher[str]):
    """A SequenceMatcher that matches the common head and tail line by line first.

    Instrumenting changes a few regions of a long file: difflib's quadratic search then runs
    only between the first and the last changed line.
    """

    def __init__(self, old: Sequence[str], new: Sequence[str]) -> None:
        limit = min(len(old), len(new))
        head = 0
        while head < limit and old[head] == new[head]:
            head += 1
        tail = 0
        while tail < limit - head and old[-1 - tail] == new[-1 - tail]:
            tail += 1
        super().__init__(None, old[head : len(old) - tail], new[head : len(new) - tail], autojunk=False)
        self._head, self._tail = head, tail
        self._old, self._new = old, new
        self._lengths = len(old), len(new)

    def get_opcodes(self) -> list[_Opcode]:
        head, tail = self._head, self._tail
        old_len, new_len = self._lengths
        codes: list[_Opcode] = [("equal", 0, head, 0, head)] if head else []
        codes += [
            (tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in super().get_opcodes()
        ]
        if tail:
            codes.append(("equal", old_len - tail, old_len, new_len - tail, new_len))
        return _slid_up(codes, self._old, self._new)


def _slid_up(codes: list[_Opcode], old: Sequence[str], new: Sequence[str]) -> list[_Opcode]:
    """Move each insertion or deletion that could sit earlier (its last line equals the line
    above it) as far up as it goes. An ambiguous block (an import inserted beside a blank line)
    then gets the earliest placement, the one difflib's whole-file search gave every patch under
    generated/ before the head was matched first."""
    out: list[_Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag in ("insert", "delete") and out and out[-1][0] == "equal":
            _, e_i1, e_i2, e_j1, e_j2 = out.pop()
            shift = 0
            while (
                e_i2 - shift > e_i1
                and (new[j2 - 1 - shift] if tag == "insert" else old[i2 - 1 - shift]) == old[i1 - 1 - shift]
            ):
                shift += 1
            out.append(("equal", e_i1, e_i2 - shift, e_j1, e_j2 - shift))
            out.append((tag, i1 - shift, i2 - shift, j1 - shift, j2 - shift))
            out.append(("equal", i2 - shift, i2, j2 - shift, j2))  # the lines it moved above
            continue
        out.append((tag, i1, i2, j1, j2))
    merged: list[_Opcode] = []
    for code in out:
        if code[0] == "equal" and code[1] == code[2]:
            continue
        if merged and code[0] == "equal" and merged[-1][0] == "equal":
            previous = merged.pop()
            code = ("equal", previous[1], code[2], previous[3], code[4])
        merged.append(code)
    return merged


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
