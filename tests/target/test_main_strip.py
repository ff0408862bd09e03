"""The strip of Megatron-LM's hand-written instrumentation (``resolve/strip_upstream.py``) against
its oracle: Megatron-LM main with #6438 stripped is AST-equal, file by file, to the same commit with
#6438 reverted, for every .py file #6438 touched (the list is computed from the two snapshots);
it touches no other file; what remains textually different is counted and printed. A hand-written
site edited into a shape the strip does not know is a located error, and nothing is written.

#6438's non-Python files (the observability docs, ``docs/index.md``, the telemetry README,
``pyproject.toml``'s nemo-lens pins) are out of the strip's scope: it removes code that runs;
documentation and dependency pins are the maintainer's to keep or revert.
"""

from __future__ import annotations

import ast
import difflib
import filecmp
import shutil
from pathlib import Path

import libcst as cst
import pytest

from codegen.cli import main
from codegen.resolve.strip_upstream import StripError, strip_tree, strip_upstream
from codegen.spec.load import load_project
from codegen.upstream import REPLACE_FLAG
from tests.support.paths import SPECS
from tests.support.upstream_main import snapshot

RUNTIME = load_project(SPECS).runtime.package.strip("/")


def _touched(with_6438: Path, minus: Path) -> list[str]:
    """The .py files #6438 changed: those that differ between the two snapshots."""
    found = []
    for path in sorted(with_6438.rglob("*.py")):
        rel = path.relative_to(with_6438)
        other = minus / rel
        if not other.is_file() or not filecmp.cmp(path, other, shallow=False):
            found.append(rel.as_posix())
    return found


def _changed_lines(a: str, b: str) -> int:
    return sum(
        1
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def test_the_strip_is_ast_equal_to_the_reverted_snapshot_on_every_touched_file() -> None:
    with_6438, minus = snapshot("with"), snapshot("minus")
    touched = _touched(with_6438, minus)
    assert len(touched) >= 14 and "megatron/training/training.py" in touched
    stripped = strip_tree(with_6438, RUNTIME)
    assert sorted(stripped) == touched, "it changes exactly the files #6438 touched"
    equal, remaining = 0, 0
    print(f"\n{'file':70} {'AST':>9} {'lines #6438 changed':>19} {'left textually':>15}")
    for rel in touched:
        original, ours = stripped[rel]
        reverted = (minus / rel).read_text(encoding="utf-8")
        same = ast.dump(ast.parse(ours)) == ast.dump(ast.parse(reverted))
        equal += same
        left = _changed_lines(reverted, ours)
        remaining += left
        verdict = "equal" if same else "DIFFERENT"
        print(f"{rel:70} {verdict:>9} {_changed_lines(reverted, original):>19} {left:>15}")
    print(f"{equal}/{len(touched)} touched .py files AST-equal; {remaining} changed lines left textually")
    assert equal == len(touched)


def test_a_tree_without_6438_strips_to_itself() -> None:
    assert strip_tree(snapshot("minus"), RUNTIME) == {}


SCHEDULES = "megatron/core/pipeline_parallel/schedules.py"
DECORATOR = "@_otel_trace_fn('microbatch', 'megatron.microbatch.forward')\n"


def _edited_tree(tmp_path: Path) -> tuple[Path, int]:
    """A tree whose one hand-written site was edited: the decorator of ``forward_step`` turned
    into a call after the function. Returns the tree and the line of the edited site."""
    with_6438 = snapshot("with")
    root = tmp_path / "main"
    (root / SCHEDULES).parent.mkdir(parents=True)
    shutil.copy2(with_6438 / "megatron/core/package_info.py", root / "megatron/core/package_info.py")
    text = (with_6438 / SCHEDULES).read_text(encoding="utf-8")
    assert DECORATOR in text
    text = text.replace(DECORATOR, "", 1)
    text += "\nforward_step = _otel_trace_fn('microbatch', 'megatron.microbatch.forward')(forward_step)\n"
    (root / SCHEDULES).write_text(text, encoding="utf-8")
    return root, text.count("\n")  # the appended line, the last


def test_an_unknown_hand_written_site_is_a_located_error(tmp_path: Path) -> None:
    root, line = _edited_tree(tmp_path)
    with pytest.raises(StripError) as caught:
        strip_tree(root, RUNTIME)
    (error,) = caught.value.lines
    assert error.startswith(
        f"{SCHEDULES}:{line}:1: error: hand-written OpenTelemetry code the {REPLACE_FLAG} "
    )
    assert "'_otel_trace_fn'" in error and "`forward_step = _otel_trace_fn(" in error


def test_an_unknown_site_stops_the_command_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, line = _edited_tree(tmp_path)
    out = tmp_path / "fork"
    assert main(["apply", str(SPECS), "--source", str(root), "--out", str(out), REPLACE_FLAG]) == 3
    err = capsys.readouterr().err
    assert f"{SCHEDULES}:{line}:1: error: " in err
    assert f"{REPLACE_FLAG}: 1 hand-written site not recognised; nothing was written" in err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("x = 1\nprint(_otel_sg_enabled('step'))\n", "2:1: error: "),
        (
            "def f():\n    with _otel_managed_span('job', 'a'):\n        pass\n    return _otel_x\n",
            "4:5: error: ",
        ),
        ("for x in _otel_items():\n    print(x)\n", "1:1: error: "),
        ("def f(tracer=_otel_tracer()):\n    return tracer\n", "1:7: error: "),
        ("class Span(_otel_base):\n    pass\n", "1:1: error: "),
    ],
    ids=["call-argument", "return", "for", "parameter-default", "class-base"],
)
def test_otel_names_in_unknown_statements_are_errors(source: str, error: str) -> None:
    with pytest.raises(StripError) as caught:
        strip_upstream(cst.parse_module(source), "m.py")
    assert caught.value.lines[0].startswith(f"m.py:{error}")


def test_generators_own_names_are_left_alone() -> None:
    source = "import megatron.core.otel as _otel\n\n_otel_span = _otel.start_span('x')\n_otel_span and _otel_span.end()\n"
    assert strip_upstream(cst.parse_module(source), "m.py").code == source


def test_names_imported_from_nemo_lens_go_with_their_import() -> None:
    source = (
        "from nemo.lens.helpers import managed_span\n\n\n"
        "def f():\n    with managed_span('layer', 'x'):\n        g()\n"
    )
    stripped = strip_upstream(cst.parse_module(source), "m.py").code
    assert ast.dump(ast.parse(stripped)) == ast.dump(ast.parse("def f():\n    g()\n"))
