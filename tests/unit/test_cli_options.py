"""The command line becomes one frozen options object per command (``codegen.cli.parser``), and
every file the generator writes lands whole or not at all (``codegen.atomic``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from codegen.atomic import staged, write_files
from codegen.cache import RunOptions
from codegen.cli.options import ApplyOptions, PackageOptions, ReportOptions, ValidateOptions, VerifyOptions
from codegen.cli.parser import parse


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (
            ["apply", "specs", "--source", "tree", "--in-place", "--docs", "tree/docs", "--check"],
            ApplyOptions,
        ),
        (["validate", "specs", "--allow-missing", "--replace-upstream", "--strict"], ValidateOptions),
        (["verify", "specs", "a.json", "b.json", "--groups", "training"], VerifyOptions),
        (["package", "specs", "--source", "tree", "--replace-upstream", "--out", "w"], PackageOptions),
        (["report", "a.json", "--trace-ranks", "0-1,3", "--trace-iterations", "2-4"], ReportOptions),
    ],
)
def test_each_command_parses_into_its_frozen_options(argv: list[str], kind: type) -> None:
    options = parse(argv)
    assert type(options) is kind
    assert options.argv == tuple(argv)  # the hints re-run the command as it was given
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.specs = Path("elsewhere")  # type: ignore[misc]


def test_apply_options_carry_what_the_generation_depends_on() -> None:
    options = parse(["apply", "specs", "--source", "tree", "--runtime", "dependency", "--replace-upstream"])
    assert isinstance(options, ApplyOptions) and not options.in_tree
    assert options.run == RunOptions(Path("specs"), Path("tree"), None, False, True, "dependency")
    assert parse(["apply", "specs", "--allow-dirty"]).in_tree  # type: ignore[attr-defined]


def test_report_options_hold_parsed_values() -> None:
    options = parse(["report", "a.json", "b.json", "--trace-ranks", "0-1,3", "--trace-iterations", "2-4"])
    assert isinstance(options, ReportOptions)
    assert options.captures == (Path("a.json"), Path("b.json"))
    assert options.trace_ranks == (0, 1, 3) and options.trace_iterations == (2, 4)


def test_staged_writes_land_together_or_not_at_all(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("before\n")
    os.chmod(tmp_path / "kept.txt", 0o600)
    with pytest.raises(RuntimeError), staged(tmp_path) as files:
        files.write("kept.txt", "after\n")
        files.write("new/one.txt", "one\n")
        raise RuntimeError("a failure half way")
    assert (tmp_path / "kept.txt").read_text() == "before\n"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["kept.txt"]  # no temporaries
    write_files(tmp_path, {"kept.txt": "after\n", "new/one.txt": b"one\n"})
    assert (tmp_path / "kept.txt").read_text() == "after\n"
    assert (tmp_path / "kept.txt").stat().st_mode & 0o777 == 0o600  # the file's mode is kept
    write_files(tmp_path, {"new/one.txt": None})
    assert not (tmp_path / "new").exists()  # deleting the last file of a folder takes the folder
