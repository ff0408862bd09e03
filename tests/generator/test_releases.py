"""Version-aware specs on fixture trees: the tree's release, --release, exit 3 on a tree the specs
do not fit, --allow-missing, where apply may write, a Megatron-LM checkout, the coverage page."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codegen.cli import main
from codegen.instrumentation._package_info import tree_release
from codegen.pipeline import generate
from codegen.spec.load import load_project
from tests.generator.support import (
    DEMO,
    FIXTURES,
    PACKAGE_INFO,
    WORK_SPEC,
    make_project,
    package_info,
    pin_fixture_tree,
)
from tests.support.paths import CASES

SPEC = (
    WORK_SPEC
    + """\
  - name: demo.new
    group: step
    function: added_in_0_0_1
    releases: {versions: ">=0.0.1", reason: added_in_0_0_1 is new in 0.0.1}
  - name: demo.step
    group: step
    function: work
    around: {any: [{assign: scaled}, {return: x + 1}]}
"""
)
SOURCE = '''def work(x):
    """Doc."""
    return x + 1
'''
NEWER = (
    SOURCE
    + """

def added_in_0_0_1():
    scaled = 2
    return scaled
"""
)


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    return make_project(tmp_path, SPEC, SOURCE)


# -- the tree's release ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('MAJOR = 0\nMINOR = 19\nPATCH = 2\nPRE_RELEASE = ""\nVERSION = (MAJOR, MINOR, PATCH)\n', "0.19.2"),
        ("MAJOR = 0\nMINOR = 20\nPATCH = 0\nPRE_RELEASE = 'rc1'\n", "0.20.0rc1"),
        ("MAJOR = 0\nMINOR = 18\nPATCH = 2\n", "0.18.2"),
        ("__version__ = '0.21.0'\n", "0.21.0"),
        ("MAJOR = 0\nMINOR = 19\n", None),  # no PATCH
        ("from .version import *\n", None),
        ("MAJOR = (\n", None),  # does not parse
    ],
)
def test_release_read_from_package_info(tmp_path: Path, text: str, expected: str | None) -> None:
    (tmp_path / "megatron/core").mkdir(parents=True)
    (tmp_path / PACKAGE_INFO).write_text(text)
    assert tree_release(tmp_path) == expected


def test_release_of_a_tree_without_package_info_is_unknown(tmp_path: Path) -> None:
    (tmp_path / "megatron").mkdir()
    assert tree_release(tmp_path) is None


def test_unreadable_release_is_exit_3_unless_release_says_it(
    project: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = project
    (root / PACKAGE_INFO).unlink()
    assert main(["validate", str(specs), "--source", str(root)]) == 3
    err = capsys.readouterr().err
    assert "cannot read the megatron-core version from megatron/core/package_info.py" in err
    assert "--release X.Y.Z" in err and "Traceback" not in err
    assert main(["validate", str(specs), "--source", str(root), "--release", "0.0.0"]) == 0
    assert "(megatron-core 0.0.0)" in capsys.readouterr().out


def test_release_excludes_entries_and_says_so(
    project: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = project
    generation = generate(specs, root)
    assert generation.tree is not None and generation.tree.release == "0.0.0"
    assert [s.name for s in generation.excluded] == ["demo.new"]
    assert [s.name for s in generation.project.spans] == ["demo.work", "demo.step"]
    assert "demo.new" not in generation.docs["spans.md"]
    assert main(["validate", str(specs), "--source", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        "case.yaml:6:5: note: span 'demo.new' (megatron/demo.py: added_in_0_0_1) is not in megatron-core 0.0.0: added_in_0_0_1 is new in 0.0.1"
        in out
    )
    assert "2 spans in 1 files" in out


def test_release_option_overrides_the_tree(
    project: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The tree says 0.0.0; --release 0.0.1 makes demo.new apply (and its function is missing)."""
    specs, root = project
    assert main(["validate", str(specs), "--source", str(root), "--release", "0.0.1"]) == 3
    err = capsys.readouterr().err
    assert "span 'demo.new' (megatron/demo.py: added_in_0_0_1): function 'added_in_0_0_1' not found" in err
    assert "megatron-core 0.0.1, given by --release (the tree says 0.0.0)" in err
    (root / DEMO).write_text(NEWER)
    assert main(["validate", str(specs), "--source", str(root), "--release", "0.0.1"]) == 0
    assert "3 spans in 1 files" in capsys.readouterr().out


@pytest.mark.parametrize("release", ["0.0", "latest", "0.0.1.2"])
def test_malformed_release_is_exit_2(project: tuple[Path, Path], release: str, capsys) -> None:
    specs, root = project
    assert main(["validate", str(specs), "--source", str(root), "--release", release]) == 2
    assert f"error: --release {release}: not a version X.Y.Z" in capsys.readouterr().err


def test_release_the_specs_do_not_support_is_exit_2(project: tuple[Path, Path], capsys) -> None:
    specs, _ = project
    assert main(["apply", str(specs), "--release", "0.9.0", "--out", "fork"]) == 2
    err = capsys.readouterr().err
    assert "--release 0.9.0: not a release the specs support (0.0.0, 0.0.1)" in err
    assert "--source DIR [--release 0.9.0]" in err


def test_any_takes_the_alternative_the_code_has(project: tuple[Path, Path]) -> None:
    specs, root = project
    old = generate(specs, root)
    assert "`demo.step` | step | `megatron/demo.py`<br>`work` | {return: x + 1}" in old.docs["spans.md"]
    (root / DEMO).write_text(SOURCE.replace('    """Doc."""\n', '    """Doc."""\n    scaled = x\n'))
    new = generate(specs, root)
    assert "`work` | {assign: scaled}" in new.docs["spans.md"]
    assert 'otel.start_span("demo.step")\n        try:\n            scaled = x\n' in new.changes[DEMO][1]


def test_transform_case_at_the_next_release(tmp_path: Path) -> None:
    """tests/transform_cases/release_alternatives at 0.0.1: the entries for 0.0.1 only appear,
    the one for older releases goes."""
    case = CASES / "release_alternatives"
    specs, root = make_project(tmp_path, (case / "spec.yaml").read_text(), (case / "input.py").read_text())
    (root / PACKAGE_INFO).write_text(package_info("0.0.1"))
    generation = generate(specs, root)
    output = generation.changes[DEMO][1]
    assert 'otel.start_span("demo.sniff")' in output and "demo.old_only" not in output
    assert '"""Build and load."""\n    _otel.configure(args)\n' in output
    assert [e.releases.text for e in generation.excluded] == ["<0.0.1"]  # type: ignore[union-attr]
    compile(output, DEMO, "exec")


# -- a tree the specs do not fit: exit 3, or --allow-missing ------------------------------------

MISMATCH = """\
file: megatron/demo.py
spans:
  - name: demo.work
    group: step
    function: work
  - name: demo.gone
    group: step
    function: renamed_upstream
  - name: demo.call
    group: step
    function: work
    around: {call: compute}
hooks:
  - function: work
    after: {assign: y}
    call: otel.reset()
"""


def test_mismatch_lists_every_entry_that_cannot_be_placed_and_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = make_project(tmp_path, MISMATCH, SOURCE)
    out = tmp_path / "fork"
    code = main(["apply", str(specs), "--source", str(root), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert (
        "case.yaml:8:15: error: span 'demo.gone' (megatron/demo.py: renamed_upstream): function 'renamed_upstream' not found in megatron/demo.py"
        in err
    )
    assert (
        "case.yaml:12:20: error: span 'demo.call' (megatron/demo.py: work): selector {call: compute} matches no statement in work"
        in err
    )
    assert (
        "case.yaml:15:21: error: hook (megatron/demo.py: work): selector {assign: y} matches no statement in work"
        in err
    )
    assert "3 entries of" in err and "cannot be placed in" in err and "--allow-missing" in err
    assert "Traceback" not in err
    assert not out.exists() and not (specs.parent / "generated").exists()


def test_same_mismatch_on_the_pinned_release_is_a_spec_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = make_project(tmp_path, MISMATCH, SOURCE)
    pin_fixture_tree(tmp_path / "cache", root, monkeypatch)
    assert main(["validate", str(specs)]) == 2
    assert "3 errors" in capsys.readouterr().err


def test_allow_missing_writes_a_partial_fork_and_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = make_project(tmp_path, MISMATCH, SOURCE)
    fork, generated = tmp_path / "fork", tmp_path / "out"
    argv = ["apply", str(specs), "--source", str(root), "--out", str(fork), "--allow-missing"]
    assert main(argv + ["--generated", str(generated)]) == 0
    captured = capsys.readouterr()
    assert (
        "case.yaml:8:15: warning: span 'demo.gone' (megatron/demo.py: renamed_upstream): function"
        in captured.err
    )
    assert "left out 3 entries that cannot be placed" in captured.err
    instrumented = (fork / DEMO).read_text()
    assert 'otel.start_span("demo.work")' in instrumented and "demo.gone" not in instrumented
    compile(instrumented, DEMO, "exec")
    report = (fork / "otel-codegen-report.md").read_text()
    assert report.startswith("# Instrumentation report\n")
    assert "Placed: 1 spans and 0 hooks. Left out: 3 entries" in report
    assert "| span 'demo.gone' (megatron/demo.py: renamed_upstream) | " in report
    assert "selector {call: compute} matches no statement in work" in report
    assert (generated / "docs" / "report.md").read_text() == report
    assert "`demo.gone`" not in (generated / "docs" / "spans.md").read_text()
    # the default generated/ is never written with --allow-missing
    assert not (specs.parent / "generated").exists()
    assert main(["apply", str(specs), "--source", str(root), "--allow-missing"]) == 2


# -- where apply may write ---------------------------------------------------------------------


def test_source_tree_never_writes_the_default_generated(
    project: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = project
    generated = specs.parent / "generated"
    generated.mkdir()
    (generated / "docs").mkdir()
    (generated / "docs" / "spans.md").write_text("<!-- Generated by megatron-otel-codegen -->\nreviewed\n")
    before = (generated / "docs" / "spans.md").read_text()
    assert main(["apply", str(specs), "--source", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the reviewed patch set of the pinned release" in err[0]
    assert "--source" in err[0] and "--out DIR" in err[0]
    assert main(["apply", str(specs), "--source", str(root), "--check"]) == 2
    fork = tmp_path / "fork"
    assert main(["apply", str(specs), "--source", str(root), "--out", str(fork)]) == 0
    assert (fork / DEMO).is_file()
    assert (generated / "docs" / "spans.md").read_text() == before
    assert sorted(p.name for p in generated.rglob("*")) == ["docs", "spans.md"]


def _two_releases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fixture project whose pinned 0.0.0 and supported 0.0.1 are both in the upstream cache."""
    specs, root = make_project(tmp_path, SPEC, SOURCE)
    pin_fixture_tree(tmp_path / "cache", root, monkeypatch)
    newer = tmp_path / "newer"
    (newer / "megatron/core").mkdir(parents=True)
    (newer / DEMO).write_text(NEWER)
    (newer / PACKAGE_INFO).write_text(package_info("0.0.1"))
    pin_fixture_tree(tmp_path / "cache", newer, release="0.0.1")
    return specs, newer


def test_other_release_writes_only_where_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    specs, _ = _two_releases(tmp_path, monkeypatch)
    generated = specs.parent / "generated"
    assert main(["apply", str(specs)]) == 0  # the pinned release: the default generated/
    pinned = {p: p.read_bytes() for p in generated.rglob("*") if p.is_file()}
    assert main(["apply", str(specs), "--release", "0.0.0"]) == 0
    assert main(["apply", str(specs), "--release", "0.0.1", "--check"]) == 2
    err = capsys.readouterr().err
    assert "megatron-core 0.0.1 is not the pinned release" in err
    # alone, the fork goes to build/ beside the specs, the pinned generated/ is left alone
    assert main(["apply", str(specs), "--release", "0.0.1"]) == 0
    assert (
        'otel.start_span("demo.new")' in (specs.parent / "build" / "megatron-core-0.0.1" / DEMO).read_text()
    )
    assert "is left alone" in capsys.readouterr().out
    fork = tmp_path / "fork"
    assert main(["apply", str(specs), "--release", "0.0.1", "--out", str(fork)]) == 0
    assert 'otel.start_span("demo.new")' in (fork / DEMO).read_text()
    assert "megatron-core 0.0.1, a supported release" in (fork / "otel-codegen-report.md").read_text()
    assert {p: p.read_bytes() for p in generated.rglob("*") if p.is_file()} == pinned
    assert "docs/report.md" not in {p.relative_to(generated).as_posix() for p in pinned}


def test_megatron_lm_checkout_is_a_source_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkout: megatron/ beside the launch scripts, tests and .git; its megatron/ is the tree."""
    specs, checkout = make_project(tmp_path, SPEC, NEWER)
    (checkout / "megatron/core/package_info.py").write_text(package_info("0.0.1"))
    (checkout / "pretrain_gpt.py").write_text("from megatron.demo import work\n")
    (checkout / "tests").mkdir()
    (checkout / "tests/test_x.py").write_text("pass\n")
    (checkout / ".git").mkdir()
    (checkout / ".git/HEAD").write_text("ref: refs/heads/main\n")
    fork = tmp_path / "fork"
    assert main(["apply", str(specs), "--source", str(checkout), "--out", str(fork)]) == 0
    assert "megatron-core 0.0.1" in capsys.readouterr().out
    assert 'otel.start_span("demo.new")' in (fork / DEMO).read_text()
    assert (fork / "pretrain_gpt.py").read_text() == "from megatron.demo import work\n"
    assert (fork / "tests/test_x.py").is_file() and (fork / "megatron/otel/__init__.py").is_file()
    assert not (fork / ".git").exists(), "a checkout's history is not copied into the fork"


# -- the coverage page -------------------------------------------------------------------------


def test_coverage_page_has_a_row_per_span_and_a_column_per_release(project: tuple[Path, Path]) -> None:
    specs, root = project
    page = generate(specs, root).docs["releases.md"]
    assert "| Span | Where | 0.0.0 (pinned) | 0.0.1 |" in page
    assert "| `demo.work` | `megatron/demo.py`<br>`work` | placed | placed |" in page
    assert (
        "| `demo.new` | `megatron/demo.py`<br>`added_in_0_0_1` | not in this release: added_in_0_0_1 is new in 0.0.1 | placed |"
        in page
    )
    assert "| placed in the code | 2 | 3 |" in page
    assert "| not in this release | 1 | 0 |" in page
    project_ = load_project(specs)
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    names = [n for s in project_.spans for n in (s.names or (s.name,))] + [s.name for s in project_.lifecycle]
    assert len(rows) == len(names)


def test_coverage_page_is_the_same_for_every_release(project: tuple[Path, Path]) -> None:
    specs, root = project
    (root / DEMO).write_text(NEWER)
    (root / PACKAGE_INFO).write_text(package_info("0.0.1"))
    newer = generate(specs, root).docs["releases.md"]
    (root / PACKAGE_INFO).write_text(package_info("0.0.0"))
    assert generate(specs, root).docs["releases.md"] == newer


def test_fixture_sources_have_their_release() -> None:
    assert tree_release(FIXTURES / "src") == "0.0.0"


def test_supported_releases_are_checked_with_locations(project: tuple[Path, Path], capsys) -> None:
    specs, root = project
    telemetry = (specs / "telemetry.yaml").read_text()
    start = telemetry.index("  supported:")
    end = telemetry.index("runtime:")
    supported = f"""\
  supported:
    - {{version: 0.0.0, filename: a.whl, sha256: {"a" * 64}}}
    - {{version: '0.1', filename: b.whl, sha256: {"b" * 64}}}
    - {{version: 0.0.2, filename: c.whl, sha256: C0FFEE}}
    - {{version: 0.0.3, filename: d.whl}}
"""
    (specs / "telemetry.yaml").write_text(telemetry[:start] + supported + telemetry[end:])
    assert main(["validate", str(specs), "--source", str(root)]) == 2
    err = capsys.readouterr().err
    line = telemetry[:start].count("\n") + 2
    assert f"telemetry.yaml:{line}:17: error: release 0.0.0 is already declared (the pinned release)" in err
    assert f"telemetry.yaml:{line + 1}:17: error: supported release '0.1' must be a version X.Y.Z" in err
    assert f"telemetry.yaml:{line + 2}:49: error: sha256 must be 64 lowercase hex digits" in err
    assert f"telemetry.yaml:{line + 3}:7: error: supported release is missing 'sha256'" in err
    # entries are checked against what is supported: demo.new (>=0.0.1) would never apply now
    assert "case.yaml:9:26: error: releases '>=0.0.1' includes none of the supported releases (0.0.0)" in err


def test_notes_name_the_spec_file_as_seen_from_where_the_command_ran(
    project: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same apply from the project's directory and from its parent: each run's note names a
    path valid where it ran, though the second run's outputs come from the result cache (the note
    was cached with the first run's path: `specs/training.yaml:38:5` printed from the parent)."""
    _specs, root = project
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(tmp_path / "cache"))
    for cwd, given in ((tmp_path, "specs/"), (tmp_path.parent, f"{tmp_path.name}/specs/")):
        monkeypatch.chdir(cwd)
        out_dir = f"{tmp_path}/fork-{len(given)}"
        assert (
            main(["apply", given, "--source", str(root), "--out", out_dir, "--generated", out_dir + "-gen"])
            == 0
        )
        (note,) = [line for line in capsys.readouterr().out.splitlines() if ": note: " in line]
        path = note.split(":", 1)[0]
        assert path == f"{given}case.yaml" and (cwd / path).is_file(), note


# -- a development tree (Megatron-LM main): `upstream: development:` -------------------------

MAIN_ONLY = """\
  - name: demo.main_only
    group: step
    function: work
    releases: {versions: ">=0.1", reason: only the development tree streams}
"""


def _with_development(specs: Path, version: str) -> str:
    """The fixture's telemetry.yaml declaring ``development: version``; the line it is on."""
    telemetry = (specs / "telemetry.yaml").read_text()
    start = telemetry.index("runtime:")
    (specs / "telemetry.yaml").write_text(
        telemetry[:start] + f"  development: {version}\n" + telemetry[start:]
    )
    return str(telemetry[:start].count("\n") + 1)


def test_an_entry_may_name_the_development_tree_alone(tmp_path: Path, capsys) -> None:
    """An entry for the development tree's version only is an error without `development:` (it
    would never apply) and applies to a tree of that version with it; the releases leave it out."""
    specs, root = make_project(tmp_path, SPEC + MAIN_ONLY, SOURCE)
    assert main(["validate", str(specs), "--source", str(root)]) == 2
    assert (
        "releases '>=0.1' includes none of the supported releases (0.0.0, 0.0.1)" in capsys.readouterr().err
    )
    _with_development(specs, "0.1.0")
    assert main(["validate", str(specs), "--source", str(root)]) == 0
    main_tree = tmp_path / "main"
    shutil.copytree(root, main_tree)
    (main_tree / PACKAGE_INFO).write_text(package_info("0.1.0"))
    (main_tree / DEMO).write_text(NEWER)
    generation = generate(specs, source=main_tree)
    assert "demo.main_only" not in [s.name for s in generation.excluded]
    assert '_otel.start_span("demo.main_only")' in generation.changes[DEMO][1]
    assert "demo.main_only" in [s.name for s in generate(specs, source=root).excluded]


@pytest.mark.parametrize("version", ["0.0.1", "0.1.0.1", "main"])
def test_the_development_version_is_a_newer_release(tmp_path: Path, capsys, version: str) -> None:
    specs, root = make_project(tmp_path, SPEC, SOURCE)
    line = _with_development(specs, version)
    assert main(["validate", str(specs), "--source", str(root)]) == 2
    err = capsys.readouterr().err
    if version == "0.0.1":
        assert (
            f"telemetry.yaml:{line}:16: error: development 0.0.1 must be newer than every supported release"
            in err
        )
    else:
        assert f"telemetry.yaml:{line}:16: error: development '{version}' must be a version X.Y.Z" in err


@pytest.mark.parametrize(
    ("first", "second", "duplicate"),
    [("<0.0.1", ">=0.0.1", False), (">=0.0.0", ">=0.0.1", True), ("<0.0.1", None, True)],
)
def test_one_place_twice_is_a_duplicate_only_where_the_releases_meet(
    tmp_path: Path, capsys, first: str, second: str | None, duplicate: bool
) -> None:
    """Two entries for the same place are one span per release when their `releases:` share no
    release (0.19.2's chat span and main's streamed one)."""

    def entry(releases: str | None) -> str:
        where = f"    releases: '{releases}'\n" if releases else ""
        return f"  - name: demo.twice\n    group: step\n    function: work\n{where}"

    specs, root = make_project(tmp_path, WORK_SPEC + entry(first) + entry(second), SOURCE)
    assert main(["validate", str(specs), "--source", str(root)]) == (2 if duplicate else 0)
    assert ("duplicate span 'demo.twice'" in capsys.readouterr().err) == duplicate
