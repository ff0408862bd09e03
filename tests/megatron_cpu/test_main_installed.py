"""The instrumentation wheel on a tree that carries #6438 (issue 32, item 5): Megatron-LM main
stands in for the next release.

The wheel is built over the with-#6438 snapshot (``codegen package specs/ --source DIR
--replace-upstream``, the block of docs/guide/installed.md) and pip-installed from its file into a directory of its own; the snapshot
itself, unchanged, is on ``PYTHONPATH`` with nemo-lens beside it (so that #6438's code would record
if it ran). Megatron's CPU ``pretrain()`` (the harness's worker, main's flags, all span groups) runs
under ``opentelemetry-instrument``, exporting over OTLP/HTTP to the live receiver. Beside it, the
same configuration on the tree replace mode writes (``codegen apply --replace-upstream``, the
comparison's "generated" run), and on a copy of the snapshot instrumented in place in replace and
dependency mode with ``megatron-otel-runtime`` installed (item 6). Checked: training.py is served the replaced text, the capture has
the same span names, each as many times, as replace mode's, from the runtime's scope only (no
nemo-lens span), and the losses are bit-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

for _module in ("torch", "numpy", "opentelemetry.instrumentation", "opentelemetry.distro"):
    pytest.importorskip(_module, reason=f"{_module} is needed (tox -e runtime installs it)")

from codegen.cli import main as codegen_main
from tests.megatron_cpu.main_tree import MAIN_ARGV, TRAIN_ITERS, main_configs
from tests.megatron_cpu.otlp_receiver import OtlpReceiver
from tests.megatron_cpu.pretrain_harness import LAUNCH_OFFSETS, WORKER, environment, finish, read_spans, start
from tests.support.doc_blocks import INSTALLED, run_block, workspace
from tests.support.instrumentation_wheel import build_wheel, install_wheel
from tests.support.ports import free_port
from tests.support.upstream_main import snapshot

BIN = Path(sys.executable).parent
SPECS = Path(__file__).resolve().parents[2] / "specs"
RUN_TIMEOUT_S = 400


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built over main by the installed guide's block "package-main" (the snapshot as
    ``Megatron-LM/``), installed from its file (``--no-deps``: its dependencies are this
    environment's) into a directory of its own."""
    root = workspace(tmp_path_factory.mktemp("main-installed"))
    (root / "Megatron-LM").symlink_to(snapshot("with"), target_is_directory=True)
    run_block("package-main", root, page=INSTALLED)
    (wheel,) = (root / "dist").glob("*.whl")
    return install_wheel(wheel, root / "site")


@pytest.fixture(scope="module")
def runtime_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``codegen package --runtime``'s wheel (megatron-otel-runtime), installed from its file."""
    root = tmp_path_factory.mktemp("main-runtime")
    return install_wheel(build_wheel(root / "dist", "--runtime"), root / "site")


@pytest.fixture(scope="module")
def runs(
    wheel_site: Path,
    runtime_site: Path,
    main_root: Path,
    main_helpers: Path,
    main_shims: Path,
    nemo_lens_site: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("main-installed-runs")
    generated = main_configs(main_root, snapshot("with"), nemo_lens_site, main_shims)["generated"]
    replaced, procs = start("generated", generated, {"fork": main_root}, main_helpers, work, free_port())
    # item 6: a checkout of main instrumented in place in replace + dependency mode (the shim), the
    # runtime package and this wheel installed (a copy outside git: --allow-dirty, as the guide says)
    dependency = work / "dependency-tree"
    shutil.copytree(snapshot("with"), dependency, symlinks=True)
    argv = ["apply", str(SPECS), "--source", str(dependency), "--in-place", "--replace-upstream"]
    assert codegen_main([*argv, "--runtime", "dependency", "--allow-dirty"]) == 0
    assert (dependency / "megatron/core/otel/_taxonomy.py").is_file()
    trees = {
        "installed": (snapshot("with"), wheel_site, nemo_lens_site, main_shims),
        "dependency": (dependency, wheel_site, runtime_site, main_shims),
    }
    found: dict[str, Any] = {}
    with OtlpReceiver("http") as first, OtlpReceiver("http") as second:
        receivers = dict(zip(trees, (first, second)))
        launched = {
            name: _launch(work / name, path, receivers[name], main_helpers) for name, path in trees.items()
        }
        for name, proc in launched.items():
            output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
            (work / name / "output.txt").write_text(output)
            assert proc.returncode == 0, f"{name}: {output[-4000:]}"
        for name, receiver in receivers.items():
            document = receiver.traces()
            (work / name / "capture.jsonl").write_text(json.dumps(document) + "\n")
            result = json.loads((work / name / "result-0.json").read_text())
            found[name] = (work / name, document, result, (work / name / "output.txt").read_text())
    replaced = finish(replaced, procs)
    replaced.check()
    return {"generated": replaced, **found}


def _launch(
    out: Path, path: tuple[Path, ...], receiver: OtlpReceiver, helpers: Path
) -> subprocess.Popen[str]:
    """The worker under ``opentelemetry-instrument``: ``path`` (the tree first) as ``PYTHONPATH``,
    the spans over OTLP/HTTP to ``receiver``."""
    out.mkdir()
    now = time.time()
    extra = {key: str(round(now - offset, 3)) for key, offset in LAUNCH_OFFSETS.items()}
    extra |= receiver.environ() | {
        "OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "megatron-main-installed", "PYTHONPATH": os.pathsep.join(map(str, path)),
    }  # fmt: skip
    env = environment(path[0], extra)
    env["PATH"] = os.pathsep.join([str(BIN), env["PATH"]])
    env["PYTHONWARNINGS"] = "default"  # the finder's warnings would show
    command = [
        str(BIN / "opentelemetry-instrument"), sys.executable, str(WORKER), "--out", str(out),
        "--rank", "0", "--world-size", "1", "--port", str(free_port()), "--telemetry", "all",
        "--helpers", str(helpers), "--providers", "global", "--", *MAIN_ARGV, "--save", str(out / "ckpt"),
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _scopes(document: dict[str, Any]) -> set[str]:
    return {s.get("scope", {}).get("name", "") for rs in document["resourceSpans"] for s in rs["scopeSpans"]}


def test_the_installed_wheel_weaves_the_server_and_the_engine(wheel_site: Path) -> None:
    """Issue 40: the wheel installed from the guide's block has main's inference server modules
    and dynamic engine, woven with their spans (the #6438 tree's text replaced)."""
    from tests.support.instrumentation_wheel import MODULE, package_table
    from tests.support.serving_files import SERVING_FILES, instrumented

    table = package_table(wheel_site)
    (label,) = table["replaced"]
    for path in SERVING_FILES:
        (entry,) = [e for e in table["files"].get(path, ()) if e["release"] == label]
        woven = (wheel_site / MODULE / "woven" / f"{entry['woven']}.pysrc").read_text()
        assert instrumented(path, woven), path


def test_the_snapshot_is_served_replaced(runs: dict[str, Any]) -> None:
    _out, _doc, result, output = runs["installed"]
    assert result["megatron_file"].startswith(str(snapshot("with")))  # the tree as it is, unchanged
    assert "HandWrittenTelemetryWarning" not in output and "not instrumented" not in output
    assert result["finished"] is True
    generated = runs["generated"].results[0]
    losses = [[i["lm_loss_hex"] for i in r["iterations"]] for r in (generated, result)]
    assert losses[0] == losses[1] and len(losses[0]) == TRAIN_ITERS


def test_the_capture_is_replace_modes(runs: dict[str, Any]) -> None:
    out, document, _result, _output = runs["installed"]
    installed = Counter(span["name"] for span in read_spans(out / "capture.jsonl"))
    generated = Counter(span["name"] for span in runs["generated"].spans())
    assert len(installed) > 20
    assert installed == generated  # the same names, each as many times: nothing recorded twice
    file_scopes = {
        s.get("scope", {}).get("name", "")
        for line in runs["generated"].capture.read_text().splitlines()
        for rs in json.loads(line).get("resourceSpans", [])
        for s in rs["scopeSpans"]
    }
    assert _scopes(document) == file_scopes  # the runtime's scope only: no nemo-lens span


def test_a_dependency_mode_tree_runs_its_own_call_sites_once(runs: dict[str, Any]) -> None:
    """Item 6: the tree's call sites run (on the runtime package, through the shim); the wheel sees
    instrumented files and weaves nothing on top: replace mode's spans, each as often."""
    out, _document, result, output = runs["dependency"]
    assert result["megatron_file"].startswith(str(out.parent / "dependency-tree"))
    assert "not instrumented" not in output and "telemetry stays off" not in output
    generated = runs["generated"].results[0]
    losses = [[i["lm_loss_hex"] for i in r["iterations"]] for r in (generated, result)]
    assert losses[0] == losses[1]
    names = Counter(span["name"] for span in read_spans(out / "capture.jsonl"))
    assert len(names) > 20
    assert names == Counter(span["name"] for span in runs["generated"].spans())  # no name twice
