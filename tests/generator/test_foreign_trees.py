"""Trees a user holds that are not a supported release: a megatron-core wheel that ships only
``megatron/core`` (0.16 and older), and trees already carrying OpenTelemetry (Megatron-LM main
since PR #6438, or a fork this generator wrote). Small synthetic trees, built here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.generator.support import WORK_SPEC, make_project
from tests.support.cli import apply, codegen

SPEC = """\
spans:
  - {name: demo.core.forward, group: layer, file: megatron/core/model.py, function: forward}
  - {name: demo.core.backward, group: layer, file: megatron/core/model.py, function: backward}
  - {name: demo.train.step, group: step, file: megatron/training/training.py, function: train_step}
  - {name: demo.train.save, group: io, file: megatron/training/checkpointing.py, function: save_checkpoint}
  - {name: demo.train.eval, group: step, file: megatron/training/training.py, function: evaluate}
hooks:
  - {file: megatron/training/training.py, function: train_step, after: {assign: loss}, call: otel.reset()}
"""
CORE = "def forward(x):\n    return x + 1\n\n\ndef backward(x):\n    return x - 1\n"
TRAINING = (
    "def train_step(batch):\n    loss = sum(batch)\n    return loss\n\n\ndef evaluate():\n    return 0\n"
)
CHECKPOINTING = "def save_checkpoint(path):\n    return path\n"


def _tree(tmp_path: Path, training: bool) -> tuple[Path, Path]:
    sources = {"megatron/core/model.py": CORE}
    if training:
        sources["megatron/training/training.py"] = TRAINING
        sources["megatron/training/checkpointing.py"] = CHECKPOINTING
    return make_project(tmp_path, SPEC, None, sources)


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if "error:" in line]


def test_the_full_tree_resolves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs, root = _tree(tmp_path, training=True)
    assert codegen("validate", specs, "--source", root) == 0, capsys.readouterr().err
    assert "5 spans in 3 files" in capsys.readouterr().out


def test_core_only_tree_is_one_message_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs, root = _tree(tmp_path, training=False)
    assert codegen("validate", specs, "--source", root) == 3
    err = capsys.readouterr().err
    assert len(_errors(err)) == 1, err  # not one error per entry
    assert "Traceback" not in err
    (line,) = _errors(err)
    assert line.startswith(f"error: {root} (megatron-core 0.0.0, read from megatron/core/package_info.py): ")
    for said in (
        "the tree has megatron/core but no training package",
        "0.16 and older ship megatron/core alone",
        "megatron/training/ is missing, which leaves out 3 spans and 1 hook "
        "(demo.train.eval, demo.train.save, demo.train.step)",
        "Pass --allow-missing to instrument the 2 megatron/core spans alone",
        "give --source a Megatron-LM checkout for the training spans",
    ):
        assert said in line, line


def test_core_only_tree_with_allow_missing_instruments_the_core_spans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = _tree(tmp_path, training=False)
    fork = tmp_path / "fork"
    assert apply(specs, "--allow-missing", source=root, out=fork) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning:" in line]
    assert len(warnings) == 1, err  # one warning, not one per entry
    assert "megatron/training/ is missing, which leaves out 3 spans and 1 hook" in warnings[0]
    assert "Left out (--allow-missing): the 2 megatron/core spans are instrumented" in warnings[0]
    assert "left out 4 entries that cannot be placed" in err
    model = (fork / "megatron/core/model.py").read_text()
    assert (
        'otel.start_span("demo.core.forward")' in model and 'otel.start_span("demo.core.backward")' in model
    )
    assert not (fork / "megatron/training").exists()
    report = (fork / "otel-codegen-report.md").read_text()
    assert "Placed: 2 spans and 0 hooks. Left out: 4 entries" in report
    assert "megatron/training/ is not in the tree" in report


def test_verify_against_a_core_only_tree_says_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = _tree(tmp_path, training=False)
    capture = tmp_path / "capture.json"
    capture.write_text("", encoding="utf-8")
    assert codegen("verify", specs, capture, "--source", root) == 3
    err = capsys.readouterr().err
    assert len(_errors(err)) == 1 and "megatron/training/ is missing" in err


def _with_megatron_telemetry(root: Path, package: bool, helpers: bool) -> None:
    if package:
        telemetry = root / "megatron/core/telemetry"
        telemetry.mkdir(parents=True)
        (telemetry / "__init__.py").write_text('"""Span groups and instruments."""\n')
        (telemetry / "span_groups.py").write_text("GROUPS = ()\n")
    if helpers:
        training = root / "megatron/training/training.py"
        training.write_text(
            TRAINING
            + "\n\ndef _otel_telemetry_active():\n    return False\n"
            + "\n\ndef _start_otel_job_spans():\n    pass\n"
            + "\n\ndef _end_otel_job_spans():\n    pass\n"
        )


@pytest.mark.parametrize(("package", "helpers"), [(True, True), (False, True)], ids=["both", "helpers"])
def test_tree_with_megatrons_own_opentelemetry_is_refused_before_resolving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], package: bool, helpers: bool
) -> None:
    specs, root = _tree(tmp_path, training=True)
    _with_megatron_telemetry(root, package, helpers)
    # what would otherwise be a mismatch: the refusal comes first, before any entry is resolved
    (root / "megatron/training/checkpointing.py").write_text("def renamed(path):\n    return path\n")
    fork = tmp_path / "fork"
    assert apply(specs, source=root, out=fork) == 3
    err = capsys.readouterr().err
    assert len(_errors(err)) == 1, err
    (line,) = _errors(err)
    assert line.startswith(
        f"error: --source {root} already carries hand-written OpenTelemetry instrumentation "
    )
    line_no = TRAINING.count("\n") + 3  # the first helper, after two blank lines
    assert f"3 sites in 1 file: megatron/training/training.py:{line_no}:1 (3 def _*otel_*)" in line
    assert "core/telemetry" not in line, "the base layer is not what is refused"
    assert "would emit its spans twice" in line and "add --replace-upstream" in line
    assert "use the instrumentation the tree has (Megatron-LM's own, turned on with --otel-enabled)" in line
    assert "the specs serve 0.0.0, 0.0.1" in line and "--release X.Y.Z --out DIR" in line
    assert "save_checkpoint" not in err, "nothing was resolved"
    assert not fork.exists()
    # --allow-missing does not make it instrument the tree twice either
    assert apply(specs, "--allow-missing", source=root, out=fork) == 3
    assert not fork.exists()


def test_the_base_layer_alone_is_not_instrumentation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#6415's megatron/core/telemetry/ (span groups, metrics, no-op fallbacks) emits no span."""
    specs, root = _tree(tmp_path, training=True)
    _with_megatron_telemetry(root, package=True, helpers=False)
    fork = tmp_path / "fork"
    assert apply(specs, source=root, out=fork) == 0, capsys.readouterr().err
    assert (fork / "megatron/core/telemetry/span_groups.py").is_file()


def test_a_fork_written_by_this_generator_is_still_a_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not foreign instrumentation: the generator strips its own constructs and re-instruments."""
    specs, root = _tree(tmp_path, training=True)
    fork = tmp_path / "fork"
    assert apply(specs, source=root, out=fork) == 0
    capsys.readouterr()
    assert codegen("validate", specs, "--source", fork) == 0, capsys.readouterr().err


def test_a_word_containing_otel_in_a_comment_is_not_instrumentation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs, root = _tree(tmp_path, training=True)
    training = root / "megatron/training/training.py"
    training.write_text(TRAINING + "# def _otel_later(): planned\nhotel_name = 'x'\n")
    assert codegen("validate", specs, "--source", root) == 0, capsys.readouterr().err


REFUSED_SPEC = """\
file: megatron/demo.py
spans:
  - {name: demo.stream, group: step, function: stream}
  - {name: demo.gone, group: step, function: renamed_upstream}
"""
REFUSED_SOURCE = "def stream(items):\n    for item in items:\n        yield item\n"


@pytest.mark.parametrize("unmatched", [False, True], ids=["refused-only", "mixed"])
def test_mismatch_advice_fits_the_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unmatched: bool
) -> None:
    """'releases:'/'any:' helps an entry the tree does not match, never a refused one."""
    spec = REFUSED_SPEC if unmatched else REFUSED_SPEC.split("  - {name: demo.gone")[0]
    specs, root = make_project(tmp_path, spec, REFUSED_SOURCE)
    assert codegen("validate", specs, "--source", root) == 3
    err = capsys.readouterr().err
    assert (
        "span 'demo.stream' (megatron/demo.py: stream): cannot instrument stream in megatron/demo.py: " in err
    )
    advice = err.strip().splitlines()[-1]
    if unmatched:
        assert advice.startswith(f"2 entries of {specs} cannot be placed in {root}")
        assert (
            "mark the 1 the tree does not match with 'releases:' or give them 'any:' alternatives" in advice
        )
        assert "the 1 refused say why and what to do; or pass --allow-missing" in advice
    else:
        assert advice.startswith(f"1 entry of {specs} cannot be placed in {root}")
        assert advice.endswith(
            "each says why it is refused and what to do; or pass --allow-missing to instrument the rest"
        )
        assert "releases:" not in advice and "any:" not in advice


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            b"def work(x):\n    return " + b"(" * 3000 + b"x" + b")" * 3000 + b"\n",
            "too many nested parentheses",
        ),
        (b"def work(x):\n    return " + b"-" * 30000 + b"x\n", "nested too deeply for a parser"),
        (b"def work(x):\n    return x\x00\x01\x02\n", "cannot parse 'megatron/demo.py'"),
        (b"def work(x):\n    return '\xff'\n", "'megatron/demo.py' is not UTF-8 text"),
    ],
    ids=["deep-brackets", "unary-chain", "binary", "latin-1"],
)
def test_hostile_source_files_are_located_errors(tmp_path: Path, text: bytes, message: str) -> None:
    """libcst's native parser overflows its stack on deep nesting (SIGSEGV): run in a subprocess,
    so that a crash is a failure here and not the end of the test run."""
    specs, root = make_project(tmp_path, WORK_SPEC, None)
    (root / "megatron/demo.py").write_bytes(text)
    result = subprocess.run(
        [sys.executable, "-m", "codegen", "validate", str(specs), "--source", str(root)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 3, (result.returncode, result.stderr[-2000:])
    assert message in result.stderr and "Traceback" not in result.stderr
    assert "mark them with 'releases:'" not in result.stderr  # no release marking fixes a broken file
