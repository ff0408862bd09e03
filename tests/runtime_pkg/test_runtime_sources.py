"""The runtime's sources (codegen/otel_runtime/): plain modules copied verbatim, one generated data
module, and a rendered package that linters and type checkers accept."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_pkg_support import make_project

from codegen import cache
from codegen.emit.runtime import (
    HEADER,
    RECORDS,
    RUNTIME_SOURCE,
    TAXONOMY,
    render_runtime,
    render_taxonomy,
    runtime_sources,
    taxonomy_format,
)
from codegen.spec.load import load_project
from codegen.spec.model import Project

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "megatron/core/otel"


def variants() -> dict[str, Project]:
    """The real taxonomy, the test project, and one without groups or telemetry sections."""
    small = make_project(PACKAGE, telemetry=False)
    empty = Project(runtime=small.runtime, upstream=small.upstream, groups=(), presets=(), spans=())
    return {"specs": load_project(REPO / "specs"), "test": make_project(PACKAGE), "empty": empty}


def write_package(root: Path, project: Project) -> Path:
    for rel, text in render_runtime(project).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    for parent in (root / "megatron", root / "megatron/core"):
        (parent / "__init__.py").write_text('"""Stand-in."""\n', encoding="utf-8")
    return root / PACKAGE


def test_runtime_modules_are_copied_verbatim() -> None:
    files = render_runtime(make_project(PACKAGE))
    sources = runtime_sources()
    assert "__init__.py" in sources and TAXONOMY not in sources
    assert set(files) == {f"{PACKAGE}/{name}" for name in (*sources, TAXONOMY)}
    for name, text in sources.items():
        assert files[f"{PACKAGE}/{name}"] == HEADER + text
        assert "{{" not in text and "{%" not in text  # plain Python, no template syntax


def test_rendered_package_is_black_formatted_like_megatron() -> None:
    black = pytest.importorskip("black")
    mode = black.Mode(line_length=100, string_normalization=False)
    for name, project in variants().items():
        for path, text in render_runtime(project).items():
            assert black.format_str(text, mode=mode) == text, (name, path)
            assert max(len(line) for line in text.splitlines()) <= 100, (name, path)


def test_source_package_taxonomy_is_current() -> None:
    """The committed codegen/otel_runtime/_taxonomy.py is what the repository's specs generate."""
    committed = (RUNTIME_SOURCE / TAXONOMY).read_text(encoding="utf-8")
    assert committed == HEADER + render_taxonomy(load_project(REPO / "specs")), (
        "stale: run `python -m codegen.emit.runtime specs`"
    )


@pytest.mark.parametrize("name", ["specs", "test", "empty"])
def test_taxonomy_is_data_only(name: str) -> None:
    """Literals, the record types of ``_records`` called with literals, and the constants GROUPS
    and FLAGS through frozenset()/tuple() and set difference."""
    project = variants()[name]
    tree = ast.parse(render_taxonomy(project))
    docstring, records, *body = tree.body
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
    assert isinstance(records, ast.ImportFrom) and (records.module, records.level) == ("_records", 1)
    record_types = [alias.name for alias in records.names]
    assert record_types == list(RECORDS)
    allowed = (ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.Set, ast.Load, ast.Sub)
    defined: list[str] = []
    for statement in body:
        assert isinstance(statement, (ast.Assign, ast.AnnAssign)), ast.dump(statement)
        target = statement.targets[0] if isinstance(statement, ast.Assign) else statement.target
        assert isinstance(target, ast.Name)
        assert statement.value is not None
        for node in ast.walk(statement.value):
            if isinstance(node, ast.Call):
                assert isinstance(node.func, ast.Name)
                assert node.func.id in ("frozenset", "tuple", *record_types), node.func.id
                assert not node.keywords
            elif isinstance(node, ast.Name):
                assert node.id in defined or node.id in ("frozenset", "tuple", *record_types), node.id
            elif isinstance(node, ast.BinOp):
                assert isinstance(node.op, ast.Sub)
            else:
                assert isinstance(node, allowed), ast.dump(node)
        defined.append(target.id)
    flags = [g.flag for g in project.groups]
    from codegen.otel_runtime import _records

    namespace: dict[str, object] = {name: getattr(_records, name) for name in record_types}
    tree.body = [docstring, *body]
    exec(compile(tree, TAXONOMY, "exec"), namespace)
    assert namespace["FORMAT"] == taxonomy_format()  # the layout a runtime checks it reads
    assert all(namespace[flag] is False for flag in flags)
    assert namespace["GROUPS"] == tuple(g.name for g in project.groups)
    assert namespace["PRESETS"] == {p.name: frozenset(project.expand_preset(p.name)) for p in project.presets}


def test_result_cache_keys_on_the_runtime_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to a runtime module is a new result-cache key (the fork gets a new copy)."""
    assert RUNTIME_SOURCE.is_relative_to(cache.PACKAGE)
    package = tmp_path / "codegen"
    shutil.copytree(cache.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "PACKAGE", package)
    before = cache.run_key(cache.RunOptions(REPO / "specs"))
    assert before is not None and cache.run_key(cache.RunOptions(REPO / "specs")) == before
    for name in ("_spans.py", TAXONOMY):
        module = package / RUNTIME_SOURCE.name / name
        module.write_text(module.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
        after = cache.run_key(cache.RunOptions(REPO / "specs"))
        assert after not in (None, before)
        before = after


def test_source_package_imports_directly() -> None:
    """The runtime's modules import as they are, from the generator's own package."""
    import codegen.otel_runtime as runtime
    from codegen.otel_runtime import _spans, _state

    assert _state.NAMESPACE is vars(runtime)
    assert runtime.enable is _spans.enable
    assert {runtime.LAYER, runtime.METRICS} == {False}
    assert runtime.GROUPS == runtime._taxonomy.GROUPS
    assert {*runtime._taxonomy.FLAGS.values(), "GROUPS", "PRESETS", "SPANS"} <= set(runtime.__all__)


def test_rendered_package_passes_pylint_docstrings_and_members(tmp_path: Path) -> None:
    """Megatron runs pylint: every module, class and public function has a docstring, and a call
    site's ``otel.LAYER`` is a known member of the package (a typo is not)."""
    pytest.importorskip("pylint")
    package = write_package(tmp_path, variants()["specs"])
    flag = "LAYER"
    probe = tmp_path / "probe.py"
    probe.write_text(
        f'"""Probe."""\n\nfrom megatron.core import otel\n\n'
        f"print(otel.{flag}, otel.METRICS, otel.start_span, otel.GROUPS, otel.NOT_A_FLAG)\n",
        encoding="utf-8",
    )
    checks = "C0114,C0115,C0116,E1101"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pylint",
            "--disable=all",
            f"--enable={checks}",
            "-sn",
            str(package),
            str(probe),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
    )
    messages = [line for line in result.stdout.splitlines() if ": " in line and line[0] != "*"]
    assert messages == [
        f"{probe.name}:5:{len(f'print(otel.{flag}, otel.METRICS, otel.start_span, otel.GROUPS, ')}: "
        "E1101: Module 'megatron.core.otel' has no 'NOT_A_FLAG' member (no-member)"
    ], result.stdout + result.stderr


@pytest.mark.parametrize("name", ["specs", "empty"])
def test_rendered_package_passes_mypy_strict_and_ruff(tmp_path: Path, name: str) -> None:
    pytest.importorskip("mypy")
    root = tmp_path / "src"
    write_package(root, variants()[name])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            "-p",
            "megatron.core.otel",
        ],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if Path(ruff).exists():
        result = subprocess.run(
            [
                ruff,
                "check",
                "--isolated",
                "--line-length",
                "100",
                "--select",
                "E,F,W,I,UP,B",
                str(root / PACKAGE),
            ],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr
