"""The instrumentation as a user installs it: no fork, no patches.

A fresh virtual environment (tests/megatron_cpu/installed_site.py) gets by real ``pip install``s
into its own site-packages megatron-core 0.19.2, the pinned wheel (``--no-deps``;
``--ignore-requires-python`` on 3.11, see there), and the wheel ``codegen package specs/`` writes
(``--no-deps``: its dependencies are in the runtime environment it sees).

Megatron's own ``pretrain()`` (the CPU harness's worker, 1 rank, save then resume; 2 ranks by the
harness's launcher, one process per rank: the worker builds its gloo group from ``--rank``, the
way the rest of these tests run it) runs under ``opentelemetry-instrument`` with the OTLP/HTTP
exporter pointed at the live receiver (``OTEL_TRACES_EXPORTER=otlp``, the distro's providers).
Checked: megatron.training is woven from site-packages, the set of span names equals the fork's
for the same configuration, ``codegen verify`` finds nothing, losses and grad norms are
bit-identical to the same run without the instrumentation; and ``uninstrument()`` leaves a later
import untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

for _module in (
    "torch",
    "numpy",
    "opentelemetry.sdk.trace",
    "opentelemetry.instrumentation",
    "opentelemetry.distro",
):
    pytest.importorskip(_module, reason=f"{_module} is needed (tox -e runtime installs it)")

from tests.megatron_cpu.installed_site import make_site
from tests.megatron_cpu.otlp_receiver import OtlpReceiver
from tests.megatron_cpu.pretrain_harness import (
    CONFIGS,
    LAUNCH_OFFSETS,
    TRAIN_ITERS,
    WORKER,
    environment,
    read_spans,
)
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
RUN_TIMEOUT_S = 400
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def site(pristine_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fresh environment, megatron-core 0.19.2 and the instrumentation pip-installed into it."""
    from codegen.cli import main

    root = tmp_path_factory.mktemp("installed")
    dist = root / "dist"
    assert main(["package", str(SPECS), "--out", str(dist)]) == 0
    (wheel,) = dist.glob("*.whl")
    return make_site(root / "venv", wheel)


def _env(site: Path, extra: dict[str, str]) -> dict[str, str]:
    env = environment(site, extra)
    env.pop("PYTHONPATH")  # megatron is the installed one
    env["PATH"] = os.pathsep.join([str(site / "bin"), str(BIN), env["PATH"]])
    return env


def _run(
    site: Path, work: Path, name: str, *, instrument: bool, telemetry: str, config: str,
    load: str | None = None, helpers: Path, receiver: OtlpReceiver | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """One run of the harness's configuration ``config`` (its Megatron flags and ranks, the
    launcher's startup timestamps) against the installed megatron-core."""
    out = work / name
    out.mkdir(parents=True)
    now = time.time()
    extra = {key: str(round(now - offset, 3)) for key, offset in LAUNCH_OFFSETS.items()}
    extra |= {"OTEL_SERVICE_NAME": "megatron-installed", "OTEL_LOGS_EXPORTER": "none"}
    if receiver is not None:
        extra |= receiver.environ() | {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none"}
    env = _env(site, extra)
    argv = [*CONFIGS[config].argv] + (["--save", str(out / "ckpt")] if CONFIGS[config].save else [])
    ranks = CONFIGS[config].ranks
    if load:
        argv += ["--load", str(work / load / "ckpt")]
    port = str(free_port())
    procs = []
    for rank in range(ranks):
        command = [
            "python", str(WORKER), "--out", str(out), "--rank", str(rank), "--world-size", str(ranks),
            "--port", port, "--telemetry", telemetry, "--helpers", str(helpers), "--providers", "global",
            "--", *argv,
        ]  # fmt: skip
        if instrument:
            command = [str(BIN / "opentelemetry-instrument"), *command]
        procs.append(
            subprocess.Popen(
                command, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    results = []
    for rank, proc in enumerate(procs):
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        (out / f"output-{rank}.txt").write_text(output)
        assert proc.returncode == 0, f"{name} rank {rank}: exit {proc.returncode}\n{output[-4000:]}"
        results.append(json.loads((out / f"result-{rank}.json").read_text()))
    return results


@pytest.fixture(scope="module")
def runs(
    site: Path, fork_root: Path, dataset_helpers: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    from tests.megatron_cpu.pretrain_harness import finish, start

    work = tmp_path_factory.mktemp("installed-runs")
    found: dict[str, Any] = {}
    # the fork's run of the same configuration (its own file capture), beside the plain run
    fork_run, fork_procs = start(
        "fork", CONFIGS["fresh"], {"fork": fork_root}, dataset_helpers, work, free_port()
    )
    found["plain"] = _run(
        site, work, "plain", instrument=False, telemetry="plain", config="fresh", helpers=dataset_helpers
    )
    fork = finish(fork_run, fork_procs)
    fork.check()
    found["fork"] = fork
    for name, config, load in (("woven", "fresh", None), ("resumed", "resume", "woven"), ("dp", "dp", None)):
        with OtlpReceiver("http") as receiver:
            results = _run(
                site, work, name, instrument=True, telemetry="all", config=config, load=load,
                helpers=dataset_helpers, receiver=receiver,
            )  # fmt: skip
            # the distro's BatchSpanProcessor flushed at exit: everything is there once the ranks are gone
            capture = work / f"{name}.jsonl"  # one OTLP JSON document per line, as read_spans reads
            capture.write_text(json.dumps(receiver.traces()) + "\n")
            found[name] = {"results": results, "capture": capture}
    return found


def _names(path: Path) -> set[str]:
    return {span["name"] for span in read_spans(path)}


def test_training_is_woven_from_site_packages(runs: dict[str, Any], site: Path) -> None:
    for name in ("woven", "resumed", "dp"):
        for result in runs[name]["results"]:
            assert result["finished"], name
            assert result["megatron_loader"] == "WovenLoader", name
            assert Path(result["megatron_file"]).is_relative_to(site), result["megatron_file"]
    plain = runs["plain"][0]
    assert plain["megatron_loader"] == "SourceFileLoader" and Path(plain["megatron_file"]).is_relative_to(
        site
    )


def test_the_installed_wheel_weaves_the_server_and_the_engine(site: Path) -> None:
    """Issue 40: the pip-installed wheel's table has the inference server's and the dynamic
    engine's modules for 0.19.2, woven with their spans (no serving run here: test_serving.py)."""
    from tests.support.instrumentation_wheel import MODULE, package_table
    from tests.support.serving_files import SERVING_FILES, instrumented

    (packages,) = {p.parent for p in site.glob(f"lib/python*/site-packages/{MODULE}")}
    table = package_table(packages)
    for path in SERVING_FILES:
        (entry,) = [e for e in table["files"].get(path, ()) if e["release"] == "0.19.2"]
        woven = (packages / MODULE / "woven" / f"{entry['woven']}.pysrc").read_text()
        assert instrumented(path, woven), path


def test_span_names_equal_the_fork_run(runs: dict[str, Any]) -> None:
    woven = _names(runs["woven"]["capture"])
    fork = _names(runs["fork"].capture)
    assert len(woven) > 20
    assert woven == fork


def test_codegen_verify_finds_nothing_on_the_lean_path(
    runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from codegen.cli import main

    for name in ("woven", "resumed", "dp"):
        # --groups "": spans a CPU cannot reach are listed in test_pretrain_cpu, not required here
        capture = str(runs[name]["capture"])
        assert main(["verify", str(SPECS), capture, "--groups", ""]) == 0, capsys.readouterr().out
        assert ": 0 findings" in capsys.readouterr().out
        # recorded on the lean path, through the provider opentelemetry-instrument set up (the
        # exporting rank; a rank that does not export records nothing)
        tracers = {result.get("tracer") for result in runs[name]["results"]} - {None}
        assert tracers == {"LeanTracer"}, (name, tracers)


def test_losses_bit_identical_to_the_run_without_instrumentation(runs: dict[str, Any]) -> None:
    def losses(results: list[dict[str, Any]]) -> list[Any]:
        return [(i["iteration"], i["lm_loss_hex"], i["grad_norm"]) for i in results[0]["iterations"]]

    plain = losses(runs["plain"])
    assert len(plain) == TRAIN_ITERS and all(loss is not None for _, loss, _ in plain)
    assert losses(runs["woven"]["results"]) == plain


def test_two_ranks_export_from_one_rank_with_every_iteration(runs: dict[str, Any]) -> None:
    spans = read_spans(runs["dp"]["capture"])
    names = [span["name"] for span in spans]
    assert names.count("megatron.train.iteration") == 2
    assert names.count("megatron.startup") == 1


def test_uninstrument_leaves_a_later_import_untouched(site: Path) -> None:
    code = """
import typing, warnings
warnings.simplefilter("ignore")
typing.override = getattr(typing, "override", lambda f: f)
from megatron_otel_instrumentation import MegatronInstrumentor
instrumentor = MegatronInstrumentor()
print(instrumentor.instrumentation_dependencies())
instrumentor.instrument()
import megatron.core.pipeline_parallel.schedules as woven
print(type(woven.__loader__).__name__)
instrumentor.uninstrument()
import sys
assert "megatron.training.async_utils" not in sys.modules  # not imported by megatron.core
import megatron.training.async_utils as later
print(type(later.__loader__).__name__)
"""
    env = _env(site, {})
    result = subprocess.run(
        [str(site / "bin" / "python"), "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines == ["('megatron-core>=0.17.1,<=0.19.2',)", "WovenLoader", "SourceFileLoader"], result.stdout
