"""The tests' shared support does what the suites rely on: captures built here read back through
codegen.capture as built, a generated tree imports without sys.path, the CLI helper passes the
options it names."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import cli
from tests.support.modules import forget, import_fresh, mount, with_pythonpath
from tests.support.otlp_json import T0, S, Spans, read_spans, simple_run, value


def test_a_built_capture_reads_back_as_built(tmp_path: Path) -> None:
    spans = Spans({"service.name": "test", "process.pid": 7, "dl.rank": 0})
    parent = spans.add("megatron.train", 0, 2, iteration=0)
    spans.add("megatron.train.iteration", 0.5, 1.5, parent, iteration=0, error=True, links=[parent])
    read = read_spans(spans.write(tmp_path / "capture.json"))
    assert [(s["name"], s["start"], s["end"], s["status"], s["pid"]) for s in read] == [
        ("megatron.train", T0, T0 + 2 * S, 0, 7),
        ("megatron.train.iteration", T0 + S // 2, T0 + 3 * S // 2, 2, 7),
    ]
    assert read[1]["parent_id"] == read[0]["span_id"] and read[1]["links"] == [read[0]["span_id"]]
    assert read[1]["attributes"] == {"megatron.span_group": "x", "megatron.iteration": 0}


def test_a_simple_run_has_one_iteration_span_per_iteration(tmp_path: Path) -> None:
    spans = Spans()
    simple_run(spans, iterations=4, save_every=2)
    read = read_spans(spans.write(tmp_path / "run.json"))
    iterations = [
        s["attributes"]["megatron.iteration"] for s in read if s["name"] == "megatron.train.iteration"
    ]
    assert iterations == [0, 1, 2, 3]
    assert read_spans(tmp_path / "absent.json") == []


@pytest.mark.parametrize(
    ("item", "encoded"),
    [
        (True, {"boolValue": True}),
        (3, {"intValue": "3"}),
        (0.5, {"doubleValue": 0.5}),
        ([1, "a"], {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "a"}]}}),
        ("x", {"stringValue": "x"}),
    ],
)
def test_values_are_encoded_as_otlp_json(item: object, encoded: dict[str, object]) -> None:
    assert value(item) == encoded


def _tree(root: Path, text: str) -> Path:
    (root / "pkgdemo" / "sub").mkdir(parents=True)
    (root / "pkgdemo" / "sub" / "mod.py").write_text(text)
    return root


def test_a_mounted_tree_imports_without_sys_path(tmp_path: Path) -> None:
    before = list(sys.path)
    first, _ = import_fresh(_tree(tmp_path / "a", "X = 1\n"), "pkgdemo.sub.mod", "pkgdemo.none")
    second, _ = import_fresh(_tree(tmp_path / "b", "X = 2\n"), "pkgdemo.sub.mod", "pkgdemo.none")
    try:
        assert (first.X, second.X) == (1, 2)  # the second import is the second tree's, afresh
        assert sys.path == before
    finally:
        forget("pkgdemo")
    assert not [name for name in sys.modules if name.startswith("pkgdemo")]


def test_a_mounted_regular_package_runs_its_init(tmp_path: Path) -> None:
    (tmp_path / "pkgdemo").mkdir()
    (tmp_path / "pkgdemo" / "__init__.py").write_text("READY = True\n")
    try:
        assert mount(tmp_path, "pkgdemo").READY is True
    finally:
        forget("pkgdemo")


def test_with_pythonpath_puts_the_tree_first_for_a_subprocess(tmp_path: Path) -> None:
    _tree(tmp_path, "X = 3\n")
    env = with_pythonpath(tmp_path, env={"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", "import pkgdemo.sub.mod as m; print(m.X)"],
        env=with_pythonpath(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout == "3\n", done.stderr


def test_the_cli_helper_passes_the_named_options_then_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    import codegen.cli

    seen: list[list[str]] = []
    monkeypatch.setattr(codegen.cli, "main", lambda argv: seen.append(argv) or 3)
    assert cli.apply(Path("specs"), "--check", source=Path("src"), out="fork") == 3
    assert cli.codegen("validate", Path("specs")) == 3
    assert seen == [["apply", "specs", "--source", "src", "--out", "fork", "--check"], ["validate", "specs"]]


@pytest.mark.parametrize(("worker", "count"), [("gw0", "2"), ("gw1", "2"), ("gw2", "3"), (None, None)])
def test_free_ports_of_two_xdist_workers_never_meet(
    monkeypatch: pytest.MonkeyPatch, worker: str | None, count: str | None
) -> None:
    """Each worker draws from its own slice of the range below the ephemeral ports: a port one
    worker's receiver left (a collector "absent") is never handed to the other's (a CI run's
    multi-rank capture held another test's spans)."""
    from tests.support import ports

    for name, setting in (("PYTEST_XDIST_WORKER", worker), ("PYTEST_XDIST_WORKER_COUNT", count)):
        if setting is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, setting)
    low, high = ports.port_range()
    drawn = {ports.free_port() for _ in range(20)}
    assert all(low <= port < high for port in drawn)
    whole = ports.port_range(0, 1)
    if worker is None:
        assert (low, high) == whole
    else:
        index, workers = int(worker[2:]), int(count)
        slices = [ports.port_range(i, workers) for i in range(workers)]
        assert (low, high) == slices[index]
        assert slices[0][0] == whole[0] and slices[-1][1] == whole[1]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(slices))
