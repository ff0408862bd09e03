"""The command line: outputs, --check, --out, exit codes, and atomic writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.generator.support import DEMO, WORK_SPEC, make_project, pin_fixture_tree
from tests.support.cli import apply, codegen

SOURCE = '''def work(x):
    """Doc."""
    return x + 1
'''


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    return make_project(tmp_path, WORK_SPEC, SOURCE)


def _apply(project: tuple[Path, Path], *options: str, out: Path | None = None) -> int:
    """``codegen apply SPECS --source ROOT --generated GENERATED OPTIONS`` on the project, its
    generated/ beside its specs."""
    specs, root = project
    return apply(specs, *options, source=root, generated=specs.parent / "generated", out=out)


def test_apply_writes_patches_docs_and_fork(project: tuple[Path, Path], tmp_path: Path) -> None:
    specs, root = project
    fork = tmp_path / "fork"
    assert _apply(project, out=fork) == 0
    generated = specs.parent / "generated"
    patches = sorted(p.name for p in (generated / "patches").iterdir())
    assert patches[0] == "0001-megatron-demo.py.patch" and patches[-1] == "series"
    assert "0002-megatron-otel-__init__.py.patch" in patches
    assert (generated / "patches" / "series").read_text() == "\n".join(patches[:-1]) + "\n"
    assert "`demo.work`" in (generated / "docs" / "spans.md").read_text()
    assert 'otel.start_span("demo.work")' in (fork / DEMO).read_text()
    assert (fork / "megatron/otel/__init__.py").is_file()
    assert (root / DEMO).read_text() == SOURCE, "the source tree is never modified"
    report = (fork / "otel-codegen-report.md").read_text()
    assert "megatron-core 0.0.0, read from megatron/core/package_info.py" in report
    assert "Placed: 1 spans" in report


def test_check_reports_staleness_and_writes_nothing(
    project: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    specs, _ = project
    generated = specs.parent / "generated"
    assert _apply(project, "--check") == 1
    assert not generated.exists()
    assert "+++ " in capsys.readouterr().out

    assert _apply(project) == 0
    assert _apply(project, "--check") == 0

    (generated / "docs" / "spans.md").write_text("edited by hand\n")
    assert _apply(project, "--check") == 1
    out = capsys.readouterr().out
    assert "-edited by hand" in out and (generated / "docs" / "spans.md").read_text() == "edited by hand\n"


def test_failed_run_leaves_previous_output_untouched(project: tuple[Path, Path]) -> None:
    specs, _ = project
    assert _apply(project) == 0
    generated = specs.parent / "generated"
    before = {p: p.read_bytes() for p in generated.rglob("*") if p.is_file()}
    (specs / "case.yaml").write_text(WORK_SPEC.replace("function: work", "function: missing"))
    assert _apply(project) == 3, "a spec that does not fit the tree"
    (specs / "case.yaml").write_text(WORK_SPEC.replace("group: step", "group: nope"))
    assert _apply(project) == 2, "a malformed spec"
    assert {p: p.read_bytes() for p in generated.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in generated.parent.iterdir() if p.name.startswith(".")) == []


def test_missing_source_is_exit_3(project: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    specs, _ = project
    assert codegen("validate", specs, "--source", tmp_path / "nowhere") == 3
    assert "no such directory" in capsys.readouterr().err


def test_missing_specs_is_exit_2(tmp_path: Path, capsys) -> None:
    assert codegen("validate", tmp_path / "nope") == 2
    assert "no such spec directory" in capsys.readouterr().err


def test_validate_reports_counts(project: tuple[Path, Path], capsys) -> None:
    specs, root = project
    assert codegen("validate", specs, "--source", root) == 0
    assert "1 spans in 1 files" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["apply", "validate"])
def test_help(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        codegen(command, "--help")
    assert exit_.value.code == 0
    assert "--source DIR" in capsys.readouterr().out


def test_unchanged_second_run_reuses_the_result_cache(
    project: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(tmp_path / "cache"))
    specs, root = project
    assert _apply(project) == 0
    assert len(list((tmp_path / "cache" / "results").glob("*.json"))) == 1

    import codegen.pipeline

    class Generated(BaseException):  # not an Exception: main() must not turn it into exit 4
        pass

    def fail(*args: object, **kwargs: object) -> None:
        raise Generated("the cache should have answered")

    monkeypatch.setattr(codegen.pipeline, "generate", fail)
    assert _apply(project, "--check") == 0
    fork = tmp_path / "fork"
    assert _apply(project, out=fork) == 0
    assert 'otel.start_span("demo.work")' in (fork / DEMO).read_text()
    with pytest.raises(Generated):
        _apply(project, "--check", "--no-cache")

    # Any input that changes is a different key: here the spec, then the source.
    (specs / "case.yaml").write_text(WORK_SPEC.replace("demo.work", "demo.renamed"))
    with pytest.raises(Generated):
        _apply(project, "--check")
    (specs / "case.yaml").write_text(WORK_SPEC)
    (root / DEMO).write_text(SOURCE + "\n\ndef more():\n    pass\n")
    with pytest.raises(Generated):
        _apply(project, "--check")


def test_output_directories_that_hold_other_files_are_refused(
    project: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    specs, root = project
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine\n")
    assert apply(specs, source=root, generated=precious) == 2
    assert "holds notes.txt" in capsys.readouterr().err
    assert apply(specs, source=root, out=precious) == 2
    assert (precious / "notes.txt").read_text() == "mine\n"
    assert apply(specs, source=root, out=tmp_path) == 2
    assert "which would be replaced" in capsys.readouterr().err

    fork = tmp_path / "fork"
    assert apply(specs, source=root, out=fork) == 0
    assert apply(specs, source=root, out=fork) == 0, "its own fork is replaced"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        # a Megatron-LM checkout's top-level scripts are targets too; editing one is a new key
        (
            WORK_SPEC.replace("megatron/demo.py", "tools/demo.py"),
            "function 'work' not found in tools/demo.py",
        ),
        # even a file the key cannot see (named in a flow-style mapping) invalidates the result
        (
            "spans: [{name: demo.work, group: step, file: tools/demo.py, function: work}]\n",
            "function 'work' not found",
        ),
    ],
    ids=["named_file_outside_megatron", "file_in_a_flow_mapping"],
)
def test_cache_rechecks_the_files_a_run_read(
    spec: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(tmp_path / "cache"))
    specs, root = make_project(tmp_path, spec, None, {"tools/demo.py": SOURCE})
    assert codegen("validate", specs, "--source", root) == 0
    (root / "tools/demo.py").write_text(SOURCE.replace("def work", "def renamed"))
    assert codegen("validate", specs, "--source", root) == 3
    assert message in capsys.readouterr().err


def test_generated_and_out_guards(project: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    specs, root = project
    site = tmp_path / "site"
    (site / "docs").mkdir(parents=True)
    (site / "docs" / "index.md").write_text("mine\n")
    assert apply(specs, source=root, generated=site) == 2
    assert "holds docs/index.md" in capsys.readouterr().err
    assert (site / "docs" / "index.md").read_text() == "mine\n"

    assert apply(specs, source=root, out=root / "fork") == 2
    assert "inside --source or --generated" in capsys.readouterr().err
    generated = specs.parent / "generated"
    assert apply(specs, source=root, out=generated) == 2
    assert not (root / "fork").exists()


def test_specs_naming_a_file_that_is_not_a_spec_is_exit_2(tmp_path: Path, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\nText: with a colon\n- and a list\n")
    assert apply(readme) == 2
    err = capsys.readouterr().err
    assert "README.md:1:1: error: not a spec file" in err
    assert "Traceback" not in err
    assert not (tmp_path / "generated").exists()


def test_a_directory_where_no_spec_file_loads_is_exit_2(tmp_path: Path, capsys) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.yaml").write_text("a: [\n")
    (specs / "b.yaml").write_text("- a list\n")
    assert codegen("validate", specs) == 2
    err = capsys.readouterr().err
    assert (
        "a.yaml:2:1: error: invalid YAML" in err and "b.yaml:1:1: error: a spec file must be a mapping" in err
    )
    assert err.count(": error: ") == 2, "no follow-on errors (missing runtime, upstream, groups)"


def test_out_inside_the_cache_is_refused(
    project: tuple[Path, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    """The cache holds the pristine trees every later run instruments: no fork may land there."""
    cache = tmp_path / "cache"
    pristine = cache / "megatron-core-0.19.2-8e3e486f13f5"
    (pristine / "megatron").mkdir(parents=True)
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(cache))
    specs, root = project
    for out in (pristine / "fork", pristine / "megatron", cache):
        assert apply(specs, source=root, out=out) == 2
        assert "inside the cache" in capsys.readouterr().err or out == cache
    assert sorted(p.name for p in pristine.iterdir()) == ["megatron"]
    assert not any((pristine / "megatron").iterdir())
    assert apply(specs, source=root, generated=cache / "gen") == 2
    assert "inside the cache" in capsys.readouterr().err


def test_multi_line_help_is_folded_and_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """argparse folds the whitespace of help text; so does the generated call, which compiles."""
    spec = WORK_SPEC + (
        "env:\n  - {name: DEMO_ON, role: enabled}\n"
        "flags:\n  file: megatron/demo.py\n  function: work\n  parser: x\n  before: {return: x + 1}\n"
        "  options:\n    - option: --otel-on\n      env: DEMO_ON\n"
        '      help: "Line one, \\"quoted\\" \\\\ back.\\nLine\\ttwo."\n'
    )
    specs, root = make_project(tmp_path, spec, SOURCE)
    pin_fixture_tree(tmp_path / "cache", root, monkeypatch)  # the pinned release: generated/ is written too
    fork = tmp_path / "fork"
    assert apply(specs, out=fork) == 0
    text = (fork / DEMO).read_text()
    assert 'help="Line one, \\"quoted\\" \\\\ back. Line two."' in text
    compile(text, DEMO, "exec")
    docs = (specs.parent / "generated" / "docs" / "configuration.md").read_text()
    assert '| Line one, "quoted" \\ back. Line two. |' in docs
