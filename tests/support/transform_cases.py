"""The transform-case corpus, tests/transform_cases/<case>/: ``spec.yaml`` and ``input.py``, then
one expectation: ``expected.diff`` (the unified diff from ``input.py`` to the instrumented file, so
a reviewer reads exactly what the transform changes), ``unchanged`` (a no-op) or ``error.txt`` (a
refusal); ``check.py`` optional. ``expected_output(case)`` is the instrumented file, rebuilt by
applying the diff to the input (every line of the diff checked against the input)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from codegen.emit.patch import split_lines
from tests.support.paths import CASES

ALL_CASES = sorted(p for p in CASES.iterdir() if p.is_dir())
CHANGED = [p for p in ALL_CASES if (p / "expected.diff").is_file()]
UNCHANGED = [p for p in ALL_CASES if (p / "unchanged").is_file()]
REFUSED = [p for p in ALL_CASES if (p / "error.txt").is_file()]
CHECKED = [p for p in ALL_CASES if (p / "check.py").is_file()]
EXPECTATIONS = ("expected.diff", "unchanged", "error.txt")
CONTEXT = 1  # line of context around each change: the diff shows the change and where it lands
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@\n")


def read(case: Path, name: str) -> str:
    """The text of the case's file ``name``."""
    return (case / name).read_text(encoding="utf-8")


def case_diff(source: str, output: str) -> str:
    """The unified diff ``input.py`` -> ``output.py`` (both end in a newline): for one input,
    equal diffs are equal outputs."""
    assert source.endswith("\n") and output.endswith("\n"), "a case's files end in a newline"
    return "".join(
        difflib.unified_diff(split_lines(source), split_lines(output), "input.py", "output.py", n=CONTEXT)
    )


def apply_diff(source: str, diff: str) -> str:
    """``source`` with ``diff`` (as ``case_diff`` writes it) applied; a context or removed line
    that is not the source's line there, or a hunk out of order, raises ``ValueError``."""
    old, out, at = split_lines(source), [], 0
    lines = split_lines(diff)
    if lines[:2] != ["--- input.py\n", "+++ output.py\n"] or not _HUNK.fullmatch("".join(lines[2:3])):
        raise ValueError("not a diff from input.py to output.py")
    for line in lines[2:]:
        hunk = _HUNK.fullmatch(line)
        if hunk:
            start = int(hunk[1]) - (hunk[2] != "0")  # an empty old range names the line before it
            if start < at:
                raise ValueError(f"hunk out of order: {line!r}")
            out += old[at:start]
            at = start
        elif line[:1] == "+":
            out.append(line[1:])
        elif line[:1] in {" ", "-"} and at < len(old) and old[at] == line[1:]:
            out += [line[1:]] if line[0] == " " else []
            at += 1
        else:
            raise ValueError(f"diff does not apply at input line {at + 1}: {line!r}")
    return "".join(out + old[at:])


def expected_output(case: Path) -> str:
    """The instrumented file the case expects: its diff applied to its input."""
    return apply_diff(read(case, "input.py"), read(case, "expected.diff"))
