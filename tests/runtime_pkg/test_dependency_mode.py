"""Issue 32: the runtime as the package ``megatron-otel-runtime`` and a tree in dependency mode.

The wheel ``codegen package --runtime`` writes is installed from its file (``pip install --target``);
the tree is the import shim and the taxonomy ``codegen apply --runtime dependency`` writes as
``megatron/core/otel/`` (the specs of this repository), beside an otherwise empty ``megatron``
package. Each case runs in a fresh interpreter: what the shim does happens at import.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from codegen.diagnostics import Diagnostics
from codegen.emit.runtime import DEPENDENCY, RECORDS, declare_runtime, render_runtime, runtime_sources
from codegen.spec.load import load_project
from tests.support.instrumentation_wheel import build_wheel, install_wheel

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "megatron/core/otel"
INSTALL = "not installed: pip install megatron-otel-runtime"

PROBE = """
import argparse, json, logging, sys
records = []
logging.basicConfig(level=logging.WARNING)
logging.getLogger().addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: records.append(r.getMessage())})())
import megatron.core.otel as _otel
out = {"module": _otel.__name__, "flags": {f: getattr(_otel, f) for f in ("JOB", "LAYER", "STEP", "METRICS")}}
out["taxonomy"] = sys.modules[_otel.__name__ + "._taxonomy"].__file__
out["configure"] = sorted(_otel.configure(argparse.Namespace(otel_enabled=True, otel_span_groups="all")))
out["configure_again"] = sorted(_otel.configure(argparse.Namespace(otel_enabled=True, otel_span_groups="all")))
out["after"] = {f: getattr(_otel, f) for f in ("JOB", "LAYER", "STEP")}
out["span"] = _otel.LAYER and _otel.start_span("megatron.layer.forward") is not None
out["traced"] = _otel.traced("megatron.evaluate")(len)([1, 2])
out["stamp"] = _otel.stamp("key", 7)
out["in_worker"] = _otel.in_worker(len) is len or callable(_otel.in_worker(len))
out["no_op"] = _otel.train_iteration(3)
out["warnings"] = [m for m in records if "telemetry" in m]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"), "--runtime")


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed from its file into a directory of its own (no dependencies: the test
    environment's OpenTelemetry is used)."""
    return install_wheel(wheel, tmp_path_factory.mktemp("site"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A ``megatron`` package holding only what dependency mode writes as ``megatron/core/otel``."""
    root = tmp_path / "tree"
    project = load_project(REPO / "specs", Diagnostics())
    for path, text in render_runtime(project, DEPENDENCY).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    for package in ("megatron", "megatron/core"):
        (root / package / "__init__.py").write_text("")
    return root


def _run(tree: Path, code: str, site: Path | None = None, env: dict[str, str] | None = None) -> Any:
    """What ``code`` prints last, as JSON: run in a fresh interpreter on ``tree`` (and ``site``),
    no telemetry variables from the machine but ``env``."""
    path = [str(tree)] + ([str(site)] if site else [])
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "PYTHONPATH": os.pathsep.join(path), **(env or {})},
        capture_output=True,
        text=True,
        cwd=tree,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def _probe(tree: Path, site: Path | None, env: dict[str, str] | None = None) -> dict[str, Any]:
    return _run(tree, PROBE, site, env)


def _set_format(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_dependency_mode_writes_the_shim_and_the_taxonomy_only(tree: Path) -> None:
    written = sorted(p.relative_to(tree).as_posix() for p in (tree / PACKAGE).iterdir())
    assert written == [f"{PACKAGE}/__init__.py", f"{PACKAGE}/_taxonomy.py"]
    shim = (tree / PACKAGE / "__init__.py").read_text()
    assert shim == (REPO / "codegen" / "otel_shim" / "__init__.py").read_text()
    assert len(shim.splitlines()) < 70  # tens of lines, as #6415's fallbacks.py


def test_the_wheel_carries_the_one_runtime_source(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read("megatron_otel_runtime-0.1.0.dist-info/METADATA").decode()
        for name, text in runtime_sources().items():
            assert archive.read(f"megatron_otel_runtime/{name}").decode() == text
    assert "megatron_otel_runtime/_taxonomy.py" in names
    assert "Name: megatron-otel-runtime" in metadata
    assert wheel.name == "megatron_otel_runtime-0.1.0-py3-none-any.whl"


def test_package_absent_no_ops_and_one_warning_naming_what_to_install(tree: Path) -> None:
    out = _probe(tree, None)
    assert out["module"] == "megatron.core.otel"
    assert out["flags"] == {"JOB": False, "LAYER": False, "STEP": False, "METRICS": False}
    assert out["configure"] == [] and out["span"] is False
    assert out["traced"] == 2 and out["stamp"] == 7 and out["in_worker"] is True and out["no_op"] is None
    assert out["warnings"] == [f"telemetry stays off: {INSTALL}"]


def test_package_absent_every_runtime_function_is_a_named_no_op(tree: Path) -> None:
    """Every public function of the runtime has its no-op in the shim's own namespace, and the shim
    has no module ``__getattr__`` (with one, CPython does not specialize a module's attribute reads:
    a disabled span's flag read cost 2.4x an uninstrumented call instead of 1.6x)."""
    import codegen.otel_runtime as runtime

    probe = (
        "import json, megatron.core.otel as o; "
        "print(json.dumps([sorted(n for n in vars(o) if callable(vars(o)[n])), '__getattr__' in vars(o)]))"
    )
    names, has_getattr = _run(tree, probe)
    functions = {n for n in runtime.__all__ if callable(getattr(runtime, n))}
    assert functions <= set(names), sorted(functions - set(names))
    assert has_getattr is False


def test_package_absent_leaves_no_runtime_module_behind(tree: Path) -> None:
    """The shim hands the runtime this tree's taxonomy (as ``megatron_otel_runtime._taxonomy``) only
    when the runtime is there: absent, no ``megatron_otel_runtime`` module is left in sys.modules."""
    probe = (
        "import json, sys, megatron.core.otel; "
        "print(json.dumps(sorted(n for n in sys.modules if n.startswith(('megatron.core.otel', 'megatron_otel')))))"
    )
    modules = _run(tree, probe)
    assert modules == ["megatron.core.otel", "megatron.core.otel._records", "megatron.core.otel._taxonomy"]


def test_package_absent_stream_and_stamp_return_what_they_are_handed(tree: Path) -> None:
    """Both forms a stream call site takes (``stream(span, f(...))``; ``stream(f(...))`` in a traced
    coroutine) hand the iterable back, and ``stamp(key, value)`` its value, as the runtime does
    with the group off."""
    probe = (
        "import json, megatron.core.otel as o; "
        "print(json.dumps([list(o.stream(False, iter([1, 2]))), list(o.stream(iter([3]))), o.stamp('k', 4)]))"
    )
    assert _run(tree, probe) == [[1, 2], [3], 4]


def test_the_shims_record_types_have_the_runtimes_fields(tree: Path) -> None:
    """The taxonomy's values are the same tuples whether the shim or the runtime made their types:
    the shim's ``_records`` has every record type of the runtime's ``_records.py``, field for field."""
    from codegen.otel_runtime import _records

    probe = (
        "import json, sys, megatron.core.otel; r = sys.modules['megatron.core.otel._records']; "
        f"print(json.dumps({{n: getattr(r, n)._fields for n in {list(RECORDS)!r}}}))"
    )
    fields = _run(tree, probe)
    assert fields == {name: list(getattr(_records, name)._fields) for name in RECORDS}


def test_the_shim_reads_without_tricks(tree: Path) -> None:
    """Issue 44: no ``globals().update``, no module ``__getattr__``, no lambda, no deletion from
    sys.modules, no file-path loading: the runtime is imported by name, the taxonomy by ``from .``."""
    shim = (tree / PACKAGE / "__init__.py").read_text()
    for trick in ("globals()", "__getattr__", "lambda", "del sys.modules", "spec_from_file_location"):
        assert trick not in shim, trick
    assert "\n        import megatron_otel_runtime  #" in shim and "\nfrom . import _taxonomy  #" in shim


def test_package_absent_and_telemetry_off_says_nothing(tree: Path) -> None:
    probe = PROBE.replace("otel_enabled=True", "otel_enabled=False")
    assert _run(tree, probe)["warnings"] == []
    # the variable switches it on as the flag does
    assert _probe(tree, None, {"MEGATRON_OTEL_ENABLED": "1"})["warnings"] == [
        f"telemetry stays off: {INSTALL}"
    ]


def test_package_installed_the_tree_runs_on_it_with_its_own_taxonomy(tree: Path, installed: Path) -> None:
    out = _probe(tree, installed, {"MEGATRON_OTEL_EXPORTER": "none"})
    assert out["module"] == "megatron_otel_runtime"
    assert out["taxonomy"] == str(tree / PACKAGE / "_taxonomy.py")  # the tree's, not the wheel's
    assert not any(out["flags"].values())
    assert out["after"] == {"JOB": True, "LAYER": True, "STEP": True}  # configure() turned them on
    assert "layer" in out["configure"] and out["span"] is True
    assert not any("stays off" in w for w in out["warnings"])


@pytest.mark.parametrize("newer", ["tree", "runtime"])
def test_a_mismatched_pair_warns_once_naming_both_and_runs_without_telemetry(
    tree: Path, installed: Path, tmp_path: Path, newer: str
) -> None:
    site = tmp_path / "site"
    shutil.copytree(installed, site, ignore=shutil.ignore_patterns("__pycache__"))  # edited below
    if newer == "tree":  # an older runtime under a tree generated for a newer one
        _set_format(tree / PACKAGE / "_taxonomy.py", "\nFORMAT = 1\n", "\nFORMAT = 2\n")
        expected = "taxonomy format 2; megatron-otel-runtime 0.1.0 reads 1"  # numbers, not (1,)
    else:  # a newer runtime that no longer reads this tree's format
        _set_format(
            site / "megatron_otel_runtime" / "_version.py",
            "TAXONOMY_FORMATS = (1,)",
            "TAXONOMY_FORMATS = (2,)",
        )
        expected = "taxonomy format 1; megatron-otel-runtime 0.1.0 reads 2"
    out = _probe(tree, site, {"MEGATRON_OTEL_EXPORTER": "none"})
    assert out["module"] == "megatron.core.otel"  # the shim's no-ops
    assert out["flags"] == {"JOB": False, "LAYER": False, "STEP": False, "METRICS": False}
    assert out["configure"] == [] and out["span"] is False and out["traced"] == 2
    assert not any(out["after"].values())
    assert out["warnings"] == [f"telemetry stays off: {expected}"]


def test_the_shim_passes_megatrons_formatter_and_docstring_checks(tree: Path) -> None:
    """black -l 100 -S (Megatron's style) and pylint's docstring checks, as the vendored runtime."""
    pytest.importorskip("pylint")
    pytest.importorskip("black")
    shim = tree / PACKAGE / "__init__.py"
    black = subprocess.run([sys.executable, "-m", "black", "-q", "--check", "-l", "100", "-S", str(shim)])
    assert black.returncode == 0
    checks = "--enable=C0114,C0115,C0116"
    pylint = [sys.executable, "-m", "pylint", "--disable=all", checks, "-sn", str(tree / PACKAGE)]
    result = subprocess.run(pylint, capture_output=True, text=True, cwd=tree)
    assert result.returncode == 0, result.stdout


def test_the_otel_extra_names_the_runtime_instead_of_nemo_lens(tmp_path: Path) -> None:
    """Replace + dependency mode on main: pyproject.toml's ``otel`` extra (#6438's nemo-lens[sdk])
    names megatron-otel-runtime; nothing else in the file changes (the ``dev`` group's nemo-lens
    serves #6415's base layer and stays). A file without such an extra is left alone."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project.optional-dependencies]\ndev = [\n    "nemo-lens",\n]\n\notel = [\n    "nemo-lens[sdk]",\n]\n'
    )
    old, new = declare_runtime(pyproject) or ("", "")
    assert new == old.replace('"nemo-lens[sdk]"', '"megatron-otel-runtime>=0.1.0"')
    pyproject.write_text(
        '[project]\nname = "x"\n\n[project.optional-dependencies]\notel = [\n    "other",\n]\n'
    )
    assert declare_runtime(pyproject) is None
    assert declare_runtime(tmp_path / "absent.toml") is None
