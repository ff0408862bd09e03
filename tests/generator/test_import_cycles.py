"""No import cycle runs through the runtime: it imports nothing of the instrumented tree, and an
instrumented module imported while its package's ``__init__`` still runs imports it fine."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from codegen.atomic import write_files
from codegen.diagnostics import Diagnostics
from codegen.emit.runtime import render_runtime
from codegen.pipeline import generate
from codegen.spec.load import load_project
from tests.generator.support import make_project

REPO = Path(__file__).resolve().parents[2]
# the optional SDK, NVML for the resource attributes, requests where the OTLP/HTTP exporter (which
# depends on it) hands the runtime its session (_otlp.settle_environment)
THIRD_PARTY = {"opentelemetry", "pynvml", "requests"}


def test_the_runtime_imports_only_the_standard_library_the_sdk_and_itself() -> None:
    project = load_project(REPO / "specs", Diagnostics())
    for path, text in render_runtime(project).items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in THIRD_PARTY, f"{path} imports {name}"


SPEC = """\
file: megatron/demo.py
spans:
  - name: demo.f
    group: layer
    function: f
"""


def test_a_module_imported_by_its_package_init_imports_the_runtime(tmp_path: Path) -> None:
    """``megatron/__init__.py`` imports ``megatron.demo`` (instrumented, so it runs
    ``from megatron import otel`` while ``megatron`` is half initialised): Python imports the
    submodule, and the runtime imports nothing back."""
    specs, root = make_project(tmp_path, SPEC, "def f(x):\n    return x + 1\n")
    (root / "megatron" / "__init__.py").write_text("from megatron.demo import f\n", encoding="utf-8")
    write_files(root, {path: new for path, (_, new) in generate(specs, root).changes.items()})
    code = "import megatron; print(megatron.f(1), megatron.otel.__name__)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "megatron.otel"]
