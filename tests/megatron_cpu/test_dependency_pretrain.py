"""Issue 32: Megatron-LM main in replace mode + dependency mode, the runtime package absent.

The tree carries the call sites, the taxonomy and the import shim only; ``megatron-otel-runtime`` is
not installed. Megatron's own ``pretrain()`` on CPU, ``--otel-enabled --otel-span-groups all``,
trains bit for bit as the snapshot without #6438 does (no telemetry flags), and says once why
telemetry stays off (what to install). Two one-rank runs side by side, about a minute.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

for _module in ("torch", "triton", "numpy"):
    pytest.importorskip(_module, reason=f"{_module} is needed to run megatron")

from tests.megatron_cpu.main_tree import MAIN_ARGV, TRAIN_ITERS, instrument
from tests.megatron_cpu.pretrain_harness import Config, Run, finish, start
from tests.support.ports import free_port
from tests.support.upstream_main import snapshot

WARNING = "telemetry stays off: not installed: pip install megatron-otel-runtime"


@pytest.fixture(scope="module")
def runs(main_helpers: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    assert importlib.util.find_spec("megatron_otel_runtime") is None  # the package is absent here
    work = tmp_path_factory.mktemp("dependency-pretrain")
    tree = instrument(snapshot("with"), work / "megatron-lm", replace=True, runtime="dependency")
    roots = {"fork": tree, "pristine": snapshot("minus")}
    configs = {
        # the worker's own providers need the runtime: "global" leaves the providers to it
        "dependency": Config("all", MAIN_ARGV, save=True, worker_args=("--providers", "global")),
        "minus": Config("plain", MAIN_ARGV, tree="pristine", save=True),
    }
    started = [
        start(name, config, roots, main_helpers, work, free_port()) for name, config in configs.items()
    ]
    return {run.name: finish(run, procs) for run, procs in started}


def test_the_tree_holds_the_shim_not_the_runtime(runs: dict[str, Run]) -> None:
    (result,) = runs["dependency"].results
    otel = Path(result["megatron_file"]).parents[1] / "core" / "otel"
    assert sorted(p.name for p in otel.glob("*.py")) == ["__init__.py", "_taxonomy.py"]


def test_the_otel_extra_names_the_runtime_package(runs: dict[str, Run]) -> None:
    (result,) = runs["dependency"].results
    tree = Path(result["megatron_file"]).parents[2]
    before = (snapshot("with") / "pyproject.toml").read_text()
    assert '"nemo-lens[sdk]"' in before
    after = before.replace('"nemo-lens[sdk]"', '"megatron-otel-runtime>=0.1.0"', 1)
    assert (tree / "pyproject.toml").read_text() == after


def test_training_is_bit_identical_to_main_without_6438_and_warns_once(runs: dict[str, Run]) -> None:
    for run in runs.values():
        run.check()
        (result,) = run.results
        assert result["finished"] is True
        assert [i["iteration"] for i in result["iterations"]] == list(range(1, TRAIN_ITERS + 1))
    losses = {name: [i["lm_loss_hex"] for i in run.results[0]["iterations"]] for name, run in runs.items()}
    assert losses["dependency"] == losses["minus"]  # the same training, bit for bit
    assert runs["dependency"].outputs[0].count(WARNING) == 1
    assert "megatron-otel-runtime" not in runs["minus"].outputs[0]
