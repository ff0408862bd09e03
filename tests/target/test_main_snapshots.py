"""Megatron-LM main (d98e8a64dd) as a source tree: with #6415's base layer alone (the snapshot
with #6438 reverted) it instruments as a release does, every taxonomy row placed; with #6438's
hand-written instrumentation it is refused, naming the sites and the replace flag, and with
``--replace-upstream`` it instruments to the same code as the tree without #6438.

The snapshots are read where they lie (``tests/support/upstream_main.py``). "Main before #6438" is a
Megatron-LM commit no snapshot holds: the snapshot with #6438 reverted stands in for it.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from codegen.cli import FORK_REPORT, main
from codegen.emit.coverage import SOURCE_TREES
from codegen.pipeline import generate
from codegen.spec.load import load_project
from codegen.spec.model import Project
from codegen.upstream import REPLACE_FLAG, TELEMETRY_DIR, UpstreamPin, download_wheel, hand_written_sites
from tests.support.paths import REPO, SPECS
from tests.support.serving_files import SERVING_FILES, instrumented
from tests.support.upstream_main import WITH_6438, snapshot

RELEASES_PAGE = REPO / "generated" / "docs" / "releases.md"


def _rows(project: Project) -> int:
    """Taxonomy rows: one per span name (a span with several names has a row each), one per
    span the runtime opens: the rows of generated/docs/releases.md."""
    return sum(len(s.names or (s.name,)) for s in project.spans) + len(project.lifecycle)


def _table() -> tuple[list[str], list[list[str]]]:
    """The header cells and the rows' cells of generated/docs/releases.md's coverage table."""
    text = RELEASES_PAGE.read_text(encoding="utf-8")
    table = text[text.index("| Span |") : text.index("## Counts")].splitlines()
    cells = [
        [c.strip() for c in line.strip().strip("|").split(" | ")] for line in table if line.startswith("|")
    ]
    return cells[0], [row for row in cells[2:] if row[0].startswith("`")]


def _table_rows() -> int:
    return len(_table()[1])


def test_the_base_layer_alone_is_not_instrumentation() -> None:
    minus = snapshot("minus")
    assert (minus / TELEMETRY_DIR / "span_groups.py").is_file(), "the snapshot carries #6415"
    assert hand_written_sites(minus) == []


def test_main_without_6438_instruments_every_taxonomy_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    minus = snapshot("minus")
    out = tmp_path / "fork"
    assert main(["apply", str(SPECS), "--source", str(minus), "--out", str(out)]) == 0, (
        capsys.readouterr().err
    )
    generation = generate(SPECS, minus)
    assert generation.tree is not None and generation.tree.release == "0.20.0"
    placed, total = _rows(generation.project), _rows(load_project(SPECS))
    print(f"Megatron-LM main without #6438: {placed}/{total} taxonomy rows placed")
    # 56 of training, 8 of the inference server, 1 of the dynamic engine; the chat span is two
    # entries (rows): 0.19.2's and main's, which follows the streamed answer
    assert placed == total - 1 == _table_rows() - 1 == 65
    assert not generation.missing and not generation.absent
    ((excluded,),) = [generation.excluded]  # 0.19.2's chat entry: main has its own
    assert excluded.name == "chat" and excluded.stream is None
    assert [s.name for s in generation.project.spans if s.stream is not None] == ["chat"]
    # the fork (--out) carries the inference server's and the dynamic engine's modules (issue 40)
    for path in SERVING_FILES:
        assert instrumented(path, (out / path).read_text(encoding="utf-8")), path
    # the releases page has a column for main, and it says what this run placed
    ((label, version),) = SOURCE_TREES
    assert version == generation.tree.release and label.split()[2] in WITH_6438
    header, rows = _table()
    column = header.index(label)
    there = [row for row in rows if row[column] in ("placed", "runtime")]
    assert len(there) == len(rows) - 1, "main's column: every row there but 0.19.2's chat"
    assert {row[0] for row in there} == {row[0] for row in rows}, "every name placed on main"
    report = (out / FORK_REPORT).read_text()
    assert "Left out" in report and "chat" in report[report.index("Left out") :]


def test_main_with_6438_is_refused_naming_the_sites_and_the_replace_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_6438 = snapshot("with")
    out = tmp_path / "fork"
    assert main(["apply", str(SPECS), "--source", str(with_6438), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    (line,) = errors
    sites = hand_written_sites(with_6438)
    total = sum(n for site in sites for _, n in site.counts)
    assert f"{total} sites in {len(sites)} files" in line
    assert re.search(r"megatron/training/training\.py:\d+:\d+ \(21 _otel_managed_span, ", line), line
    assert f"add {REPLACE_FLAG}" in line and "would emit its spans twice" in line
    assert "core/telemetry" not in line, "the base layer is not named"
    assert not out.exists()


def test_main_with_6438_replaced_instruments_like_main_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_6438, minus = snapshot("with"), snapshot("minus")
    replaced, plain, patches = tmp_path / "replaced", tmp_path / "plain", tmp_path / "generated"
    argv = ["apply", str(SPECS), "--source", str(with_6438), "--out", str(replaced), REPLACE_FLAG]
    assert main([*argv, "--generated", str(patches)]) == 0, capsys.readouterr().err
    assert main(["apply", str(SPECS), "--source", str(minus), "--out", str(plain)]) == 0
    capsys.readouterr()
    # 44 of training, 8 of the inference server, 1 of the dynamic engine
    assert "Placed: 53 spans" in (replaced / FORK_REPORT).read_text()
    assert hand_written_sites(replaced) == [], "nothing hand-written is left, nothing emits twice"
    for path in SERVING_FILES:  # replace mode covers the server and the engine too (issue 40)
        assert instrumented(path, (replaced / path).read_text(encoding="utf-8")), path
        assert not instrumented(path, (with_6438 / path).read_text(encoding="utf-8")), path
    differing = []
    compared = 0
    for path in sorted(plain.rglob("*.py")):
        rel = path.relative_to(plain)
        compared += 1
        ours = (replaced / rel).read_text(encoding="utf-8")
        if ast.dump(ast.parse(ours)) != ast.dump(ast.parse(path.read_text(encoding="utf-8"))):
            differing.append(rel.as_posix())
    print(f"{compared} .py files of the two forks compared: {compared - len(differing)} AST-equal")
    assert compared > 600 and differing == []
    # the patch set of the same run, applied to the tree with #6438, gives the fork
    series = (patches / "patches" / "series").read_text().split()
    assert any("global_vars" in name for name in series) and any("pretrain_vlm" in name for name in series)
    applied = tmp_path / "applied"
    shutil.copytree(with_6438, applied)
    for name in series:
        subprocess.run(["git", "apply", str(patches / "patches" / name)], cwd=applied, check=True)
    for path in sorted(replaced.rglob("*.py")):
        rel = path.relative_to(replaced)
        assert (applied / rel).read_bytes() == path.read_bytes(), rel


@pytest.mark.parametrize("version", ["0.15.3", "0.16.1"])
def test_core_only_wheels_give_one_message_each(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The other trees a new user tries: megatron-core 0.15/0.16 wheels ship megatron/core alone."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    download_wheel(UpstreamPin("megatron-core", version, "unused.whl", "0" * 64), wheels)
    (wheel,) = wheels.glob("*.whl")
    tree = tmp_path / "tree"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tree, [n for n in archive.namelist() if n.startswith("megatron/")])
    out = tmp_path / "fork"
    assert main(["apply", str(SPECS), "--source", str(tree), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    assert f"megatron-core {version}" in errors[0] and "megatron/training/ is missing" in errors[0]
    assert "--allow-missing" in errors[0] and not out.exists()
