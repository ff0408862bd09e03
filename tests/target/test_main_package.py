"""The import-time instrumentation package on Megatron-LM main: a tree carrying #6438's
hand-written instrumentation is left untouched (no module woven, even one whose bytes match a
supported release: never two sets of spans), with one warning naming the replace command; the
same commit without #6438 gets no such warning."""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import re
import shlex
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codegen.cli import main
from tests.support.git_repo import git
from tests.support.instrumentation_wheel import (
    MODULE,
    build_wheel,
    find_spec_in,
    load_finder,
    package_table,
    unpack,
)
from tests.support.paths import SPECS
from tests.support.serving_files import SERVING_FILES, instrumented
from tests.support.upstream_main import snapshot


def _find_all(finder: Any, root: Path, table: dict[str, Any]) -> list[Any]:
    return [find_spec_in(finder, root, path) for path in table["files"] if (root / path).is_file()]


def _recorded(look_up: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    """What ``look_up()`` returns, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        return look_up(), caught


def _warned(finder_module: Any, unpacked: Path, root: Path, times: int = 1) -> tuple[list[Any], list[Any]]:
    """The specs the wheel's finder gives for every module under ``root`` it knows, looked up
    ``times`` times, and the warnings it gave."""
    table = package_table(unpacked)
    finder = finder_module.MegatronFinder(table)
    return _recorded(lambda: [spec for _ in range(times) for spec in _find_all(finder, root, table)])


def test_a_tree_with_6438_is_left_alone_with_one_warning(finder_module: Any, unpacked: Path) -> None:
    with_6438 = snapshot("with")
    specs, caught = _warned(finder_module, unpacked, with_6438, times=2)  # imported again: still one warning
    assert len(specs) > 10
    assert all(isinstance(s.loader, importlib.machinery.SourceFileLoader) for s in specs), "nothing woven"
    assert len(caught) == 1, [str(w.message) for w in caught]
    (warning,) = caught
    assert issubclass(warning.category, finder_module.HandWrittenTelemetryWarning)
    message = str(warning.message)
    assert message.startswith(f"{with_6438.resolve()}: not instrumented: ")
    assert f"--source {with_6438.resolve()} --in-place --replace-upstream" in message


def test_the_hand_written_warnings_command_runs_as_printed(
    finder_module: Any, unpacked: Path, tmp_path: Path
) -> None:
    """The warning's command (the codegen and specs the package was built with, the tree's own
    path, the flags that replace #6438), run as printed from anywhere in a git checkout of the
    tree, replaces #6438 in it; it said `codegen apply specs/ ...`."""
    checkout = (tmp_path / "Megatron-LM").resolve()
    shutil.copytree(snapshot("with"), checkout)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "main"]):
        git(checkout, *args)
    _, caught = _warned(finder_module, unpacked, checkout)
    (warning,) = caught
    (command,) = re.findall(r"`([^`]+)`", str(warning.message))
    words = shlex.split(command)
    assert Path(words[0]).name == "codegen" and Path(words[0]).is_file(), command
    tail = ["--source", str(checkout), "--in-place", "--replace-upstream"]
    assert words[1:] == ["apply", str(SPECS.resolve()), *tail], command
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("updated "), done.stdout
    assert b"_otel_managed_span(" not in (checkout / "megatron/training/training.py").read_bytes()


def test_the_tree_without_6438_gets_no_hand_written_warning(finder_module: Any, unpacked: Path) -> None:
    minus = snapshot("minus")
    _, caught = _warned(finder_module, unpacked, minus)
    assert not [w for w in caught if issubclass(w.category, finder_module.HandWrittenTelemetryWarning)]


# The wheel built over the #6438 tree too (`codegen package --source DIR --replace-upstream`): the
# main snapshot stands in for the next release.
@pytest.fixture(scope="module")
def main_unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = build_wheel(
        tmp_path_factory.mktemp("dist-main"), "--source", str(snapshot("with")), "--replace-upstream"
    )
    return unpack(built, tmp_path_factory.mktemp("site-main"))


@pytest.fixture(scope="module")
def main_finder_module(main_unpacked: Path) -> Any:
    return load_finder(main_unpacked, "main_wheel_under_test")


def _replaced_paths(table: dict[str, Any]) -> list[str]:
    (label,) = table["replaced"]
    return [p for p, entries in table["files"].items() if any(e["release"] == label for e in entries)]


def test_package_source_needs_replace_upstream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["package", str(SPECS), "--out", str(tmp_path), "--source", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "error: codegen package --source needs --replace-upstream\n"
    assert main(["package", str(SPECS), "--out", str(tmp_path), "--replace-upstream"]) == 2
    assert capsys.readouterr().err == "error: codegen package --replace-upstream needs --source DIR\n"
    assert not list(tmp_path.iterdir())


def test_the_wheel_over_main_serves_the_replaced_text(main_finder_module: Any, main_unpacked: Path) -> None:
    with_6438 = snapshot("with")
    table = package_table(main_unpacked)
    assert table["replaced"] == ["0.20.0"] and table["releases"][-1] == table["newest"] == "0.19.2"
    version = (main_unpacked / MODULE / "_version.py").read_text()
    assert "0.20.0" not in version  # not a published release: neither RELEASES nor the requirement
    finder = main_finder_module.MegatronFinder(table)
    paths = [p for p in _replaced_paths(table) if p.startswith("megatron/")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        specs = {path: find_spec_in(finder, with_6438, path) for path in paths}
        runtime = finder.find_spec("megatron.core.otel", [str(with_6438 / "megatron" / "core")])
    assert not caught, [str(w.message) for w in caught]
    assert len(specs) > 10 and "megatron/training/training.py" in specs
    assert set(SERVING_FILES) <= set(specs)  # the inference server and the engine (issue 40)
    hand_written = main_finder_module._HAND_WRITTEN
    for path, spec in specs.items():
        assert isinstance(spec.loader, main_finder_module.WovenLoader), path
        assert spec.origin == str(with_6438 / path)
        (entry,) = [e for e in table["files"][path] if e["release"] == "0.20.0"]
        assert entry["pristine"] == hashlib.sha256((with_6438 / path).read_bytes()).hexdigest()
        text = spec.loader.get_source(spec.name)
        assert hashlib.sha256(text.encode()).hexdigest() == entry["woven"]
        assert not hand_written.search(text.encode()), f"{path}: #6438's spans are still there"
    for path in SERVING_FILES:
        assert instrumented(path, specs[path].loader.get_source(specs[path].name)), path
    training = specs["megatron/training/training.py"].loader.get_source("megatron.training.training")
    assert "nemo_lens" not in training
    assert "import megatron.core.otel as _otel" in training
    assert runtime is not None and runtime.origin == str(
        main_unpacked / MODULE / "runtime" / table["runtime"]["0.20.0"] / "__init__.py"
    )


def test_the_entry_scripts_of_the_6438_tree_can_call_the_served_modules(
    main_finder_module: Any, main_unpacked: Path
) -> None:
    # The wheel serves the tree's modules, never its entry scripts (run as scripts, as #6438 wrote
    # them): every keyword an entry script passes to a function of a served module must still be
    # accepted there (pretrain_hybrid.py passes set_startup_timestamps #6438's launch timestamps).
    with_6438 = snapshot("with")
    table = package_table(main_unpacked)
    finder = main_finder_module.MegatronFinder(table)
    defined: dict[str, list[ast.FunctionDef]] = {}
    for path in [p for p in _replaced_paths(table) if p.startswith("megatron/")]:
        spec = find_spec_in(finder, with_6438, path)
        tree = ast.parse(spec.loader.get_source(spec.name))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                defined.setdefault(node.name, []).append(node)
    calls = 0
    for script in sorted(with_6438.glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            keywords = {k.arg for k in node.keywords if k.arg is not None}
            if node.func.id not in defined or not keywords:
                continue
            calls += 1
            accepted = [
                {a.arg for a in [*d.args.args, *d.args.kwonlyargs]}
                for d in defined[node.func.id]
                if d.args.kwarg is None
            ]
            assert any(keywords <= names for names in accepted) or len(accepted) < len(
                defined[node.func.id]
            ), (
                f"{script.name}:{node.lineno}: {node.func.id}({', '.join(sorted(keywords))}) does not fit the served "
                f"definition ({', '.join(sorted(accepted[0]))})"
            )
    assert calls >= 2  # set_startup_timestamps in pretrain_hybrid.py and pretrain_vlm.py at least


def _copy_modules(source: Path, target: Path, paths: list[str]) -> None:
    for path in [*paths, "megatron/core/package_info.py"]:
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / path, target / path)


def test_an_unknown_6438_tree_still_gets_the_warning(
    main_finder_module: Any, main_unpacked: Path, tmp_path: Path
) -> None:
    """One byte changed in one #6438 module: the tree is not the one the wheel was built over,
    so nothing of it is woven (not even the files that still match) and one warning says so."""
    table = package_table(main_unpacked)
    paths = [p for p in _replaced_paths(table) if p.startswith("megatron/")]
    _copy_modules(snapshot("with"), tmp_path, paths)
    changed = tmp_path / "megatron" / "core" / "transformer" / "transformer_layer.py"
    changed.write_bytes(changed.read_bytes() + b"\n")
    finder = main_finder_module.MegatronFinder(table)
    specs, caught = _recorded(lambda: [find_spec_in(finder, tmp_path, path) for path in paths])
    assert all(isinstance(s.loader, importlib.machinery.SourceFileLoader) for s in specs), "nothing woven"
    assert [w.category for w in caught] == [main_finder_module.HandWrittenTelemetryWarning]
    assert f"--source {tmp_path.resolve()} --in-place --replace-upstream" in str(caught[0].message)


def test_a_6438_module_the_wheel_does_not_know_is_a_warning(
    main_finder_module: Any, main_unpacked: Path, tmp_path: Path
) -> None:
    """A tree whose training.py is not #6438's (so its own modules are checked one by one) holding
    a module with hand-written spans that no table entry has: left alone, with the warning."""
    table = package_table(main_unpacked)
    path = "megatron/core/transformer/transformer_layer.py"
    _copy_modules(snapshot("with"), tmp_path, [path])
    module = tmp_path / path
    module.write_bytes(module.read_bytes() + b"\n")
    finder = main_finder_module.MegatronFinder(table)
    spec, caught = _recorded(lambda: find_spec_in(finder, tmp_path, path))
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    assert [w.category for w in caught] == [main_finder_module.HandWrittenTelemetryWarning]


def test_a_dependency_mode_tree_is_left_as_it_is(
    main_finder_module: Any, main_unpacked: Path, tmp_path: Path
) -> None:
    """Item 6: main in replace + dependency mode (the shim in megatron/core/otel/): every module
    the wheel knows is instrumented already; none is woven on top, none warned about, and
    ``megatron.core.otel`` is the tree's own shim."""
    out = tmp_path / "fork"
    argv = ["apply", str(SPECS), "--source", str(snapshot("with")), "--out", str(out)]
    assert main([*argv, "--replace-upstream", "--runtime", "dependency"]) == 0
    table = package_table(main_unpacked)
    finder = main_finder_module.MegatronFinder(table)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        specs = _find_all(finder, out, table)
        runtime = finder.find_spec("megatron.core.otel", [str(out / "megatron" / "core")])
    assert not caught, [str(w.message) for w in caught]
    assert len(specs) > 10
    assert all(isinstance(s.loader, importlib.machinery.SourceFileLoader) for s in specs), "nothing woven"
    assert runtime is not None and runtime.origin == str(out / "megatron" / "core" / "otel" / "__init__.py")
    # instrumented by other specs (here: one line more): it imports the runtime, so no warning either
    training = out / "megatron" / "training" / "training.py"
    training.write_bytes(training.read_bytes() + b"\n")
    finder = main_finder_module.MegatronFinder(table)
    spec, caught = _recorded(lambda: find_spec_in(finder, out, "megatron/training/training.py"))
    assert not caught, [str(w.message) for w in caught]
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)


def test_package_source_of_a_supported_release_is_refused(
    trees: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = trees["0.19.2"]
    argv = ["package", str(SPECS), "--out", str(tmp_path / "dist"), "--source", str(source)]
    assert main([*argv, "--replace-upstream"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(
        f"error: --source {source}: the tree says it is megatron-core 0.19.2, a release"
    )
    assert not (tmp_path / "dist").exists()


def test_package_source_without_6438_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the same commit without #6438: nothing to replace, so nothing the wheel would serve as replaced
    source = snapshot("minus")
    argv = ["package", str(SPECS), "--out", str(tmp_path / "dist"), "--source", str(source)]
    assert main([*argv, "--replace-upstream"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: --source {source}: the tree carries no hand-written instrumentation of PR #6438 "
        "(nothing to replace); codegen package --source takes a tree that carries it"
    ]
    assert not (tmp_path / "dist").exists()
