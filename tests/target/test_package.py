"""``codegen package``: the instrumentation wheel and its import hook, for every supported release.

Without torch, the finder's decisions are checked where they are made: ``find_spec`` for each
module the specs change, against each release's pristine tree (as a checkout on ``PYTHONPATH`` or
site-packages would hold it), a tree with one byte changed, and an instrumented tree (the fork);
what it serves is the instrumented text, compiled with the file's own path. The runtime
(``megatron.core.otel``) imports without torch and is imported for real. The woven training code
runs under ``tox -e runtime`` (tests/megatron_cpu/test_installed_instrumentation.py).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import linecache
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest

from codegen.cli import main
from tests.support.instrumentation_wheel import MODULE, RELEASES, find_spec_in, package_table
from tests.support.paths import SPECS
from tests.support.serving_files import SERVING_FILES, instrumented


def test_wheel_metadata_and_entry_point(wheel: Path) -> None:
    assert wheel.name == f"{MODULE}-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"{MODULE}-0.1.0.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        record = archive.read(f"{info}/RECORD").decode()
    assert "Name: megatron-otel-instrumentation" in metadata
    assert "Requires-Dist: opentelemetry-instrumentation" in metadata
    assert entry_points == (
        "[opentelemetry_instrumentor]\nmegatron = megatron_otel_instrumentation.instrumentor:MegatronInstrumentor\n"
    )
    assert {line.split(",")[0] for line in record.splitlines()} == set(names)
    assert not any(name.startswith("megatron/") for name in names)  # megatron itself is never shipped


def test_package_is_reproducible(wheel: Path, tmp_path: Path) -> None:
    assert main(["package", str(SPECS), "--out", str(tmp_path)]) == 0
    assert (tmp_path / wheel.name).read_bytes() == wheel.read_bytes()


def test_table_holds_every_release_keyed_by_pristine_sha(unpacked: Path, trees: dict[str, Path]) -> None:
    table = package_table(unpacked)
    assert table["releases"] == list(RELEASES)
    assert set(table["runtime"]) == set(RELEASES)
    for release in RELEASES:
        files = {p: e for p, entries in table["files"].items() for e in entries if e["release"] == release}
        assert "megatron/training/training.py" in files, release
        if release == "0.19.2":  # the serving spans' release (issue 40): the server and the engine
            assert set(SERVING_FILES) <= set(files), sorted(set(SERVING_FILES) - set(files))
            for path in SERVING_FILES:
                woven = (unpacked / MODULE / "woven" / f"{files[path]['woven']}.pysrc").read_text()
                assert instrumented(path, woven), path
        for path, entry in files.items():
            pristine = (trees[release] / path).read_bytes()
            assert hashlib.sha256(pristine).hexdigest() == entry["pristine"]
            woven = (unpacked / MODULE / "woven" / f"{entry['woven']}.pysrc").read_bytes()
            assert hashlib.sha256(woven).hexdigest() == entry["woven"] != entry["pristine"]
            assert b"otel" in woven


@pytest.mark.parametrize("release", RELEASES)
def test_every_changed_module_of_a_release_is_woven(
    release: str, finder_module: Any, unpacked: Path, trees: dict[str, Path]
) -> None:
    finder = finder_module.MegatronFinder(package_table(unpacked))
    root = trees[release]
    paths = [
        p
        for p, entries in package_table(unpacked)["files"].items()
        if any(e["release"] == release for e in entries)
    ]
    assert len(paths) >= 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a pristine release warns about nothing
        for path in paths:
            spec = find_spec_in(finder, root, path)
            assert isinstance(spec.loader, finder_module.WovenLoader), path
            assert spec.origin == str(root / path)
            source = spec.loader.get_source(spec.name)
            entry = next(e for e in package_table(unpacked)["files"][path] if e["release"] == release)
            assert hashlib.sha256(source.encode()).hexdigest() == entry["woven"]
    # the runtime the tree's package_info.py asks for
    runtime = finder.find_spec("megatron.core.otel", [str(root / "megatron" / "core")])
    key = package_table(unpacked)["runtime"][release]
    assert runtime.origin == str(unpacked / MODULE / "runtime" / key / "__init__.py")


def test_woven_code_carries_the_file_path_and_instrumented_lines(
    finder_module: Any,
    unpacked: Path,
    trees: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_BYTECODE_DIR", str(tmp_path / "bytecode"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    finder = finder_module.MegatronFinder(package_table(unpacked))
    path = "megatron/core/pipeline_parallel/schedules.py"
    spec = find_spec_in(finder, trees["0.19.2"], path)
    code = spec.loader.get_code(spec.name)
    assert code.co_filename == str(trees["0.19.2"] / path)
    source = spec.loader.get_source(spec.name)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "otel.start_span" in text)
    linecache.checkcache(spec.origin)  # what traceback does: the registered lines survive it
    assert "otel.start_span" in linecache.getline(spec.origin, line)
    cached = list((tmp_path / "bytecode").glob("*.pyc"))
    assert len(cached) == 1
    again = finder_module.MegatronFinder(package_table(unpacked))
    second = find_spec_in(again, trees["0.19.2"], path).loader.get_code(spec.name)
    assert second.co_filename == code.co_filename and second.co_code == code.co_code


def test_one_byte_changed_file_is_left_alone_with_one_warning(
    finder_module: Any, unpacked: Path, trees: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    shutil.copytree(trees["0.19.2"] / "megatron", root / "megatron")
    changed = root / "megatron/core/pipeline_parallel/schedules.py"
    data = bytearray(changed.read_bytes())
    index = data.index(b"def forward_step")
    data[index + len("def forward_ste")] = ord("P")  # def forward_steP: one byte
    changed.write_bytes(bytes(data))
    finder = finder_module.MegatronFinder(package_table(unpacked))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = find_spec_in(finder, root, "megatron/core/pipeline_parallel/schedules.py")
        again = find_spec_in(finder, root, "megatron/core/pipeline_parallel/schedules.py")
        others = [
            find_spec_in(finder, root, p)
            for p in package_table(unpacked)["files"]
            if p != "megatron/core/pipeline_parallel/schedules.py" and (root / p).is_file()
        ]
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    assert isinstance(again.loader, importlib.machinery.SourceFileLoader)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(changed) in message and "megatron-core 0.19.2" in message and "codegen apply" in message
    assert issubclass(caught[0].category, finder_module.NotWovenWarning)
    assert others and all(isinstance(s.loader, finder_module.WovenLoader) for s in others)


def test_the_not_woven_warnings_command_runs_as_printed(
    finder_module: Any, unpacked: Path, trees: dict[str, Path], tmp_path: Path
) -> None:
    """The warning's command names the tree, and the codegen and specs the package was built
    with (it said `codegen apply specs/ --source <the tree> --out <dir>`); run as printed, from
    anywhere, it makes the tree's instrumented fork."""
    root = (tmp_path / "tree").resolve()
    shutil.copytree(trees["0.19.2"] / "megatron", root / "megatron")
    changed = root / "megatron/core/pipeline_parallel/schedules.py"
    changed.write_bytes(b"# a local change\n" + changed.read_bytes())
    finder = finder_module.MegatronFinder(package_table(unpacked))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        find_spec_in(finder, root, "megatron/core/pipeline_parallel/schedules.py")
    (warning,) = caught
    (command,) = re.findall(r"`([^`]+)`", str(warning.message))
    words = shlex.split(command)
    fork = Path(f"{root}-otel")
    assert words[1:] == ["apply", str(SPECS.resolve()), "--source", str(root), "--out", str(fork)], command
    assert Path(words[0]).name == "codegen" and Path(words[0]).is_file(), command
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(["bash", "-c", command], cwd=elsewhere, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert b"a local change" in (fork / "megatron/core/pipeline_parallel/schedules.py").read_bytes()


def test_an_instrumented_tree_is_not_woven_twice(
    finder_module: Any, unpacked: Path, trees: dict[str, Path], tmp_path: Path
) -> None:
    """The fork of 0.19.2 (its instrumented files and its own megatron/core/otel)."""
    fork = tmp_path / "fork"
    options = ["--release", "0.19.2", "--out", str(fork), "--generated", str(tmp_path / "g")]
    assert main(["apply", str(SPECS), *options]) == 0
    finder = finder_module.MegatronFinder(package_table(unpacked))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in package_table(unpacked)["files"]:
            if (fork / path).is_file():
                spec = find_spec_in(finder, fork, path)
                assert isinstance(spec.loader, importlib.machinery.SourceFileLoader), path
    runtime = finder.find_spec("megatron.core.otel", [str(fork / "megatron" / "core")])
    assert runtime.origin == str(fork / "megatron/core/otel/__init__.py")


def _python(unpacked: Path, tree: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(unpacked), str(tree)]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)


def test_nothing_woven_until_switched_on_and_runtime_resolves(
    unpacked: Path, trees: dict[str, Path], tmp_path: Path
) -> None:
    """megatron/core/__init__.py imports torch: a tree of the release's package_info.py under an
    empty megatron.core stands in for it, so the runtime really imports here."""
    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text("")
    shutil.copy2(trees["0.17.1"] / "megatron/core/package_info.py", tree / "megatron/core/package_info.py")
    code = """
import sys
import megatron_otel_instrumentation
from megatron_otel_instrumentation import _finder
assert not _finder.installed() and not any(type(f).__name__ == "MegatronFinder" for f in sys.meta_path)
_finder.install()
import megatron.core.otel as otel
print(otel.__file__)
print(sorted(otel.GROUPS)[:1])
_finder.uninstall()
assert not _finder.installed()
"""
    result = _python(unpacked, tree, code)
    assert result.returncode == 0, result.stderr
    origin = Path(result.stdout.splitlines()[0])
    key = package_table(unpacked)["runtime"]["0.17.1"]
    assert origin == unpacked / MODULE / "runtime" / key / "__init__.py"
