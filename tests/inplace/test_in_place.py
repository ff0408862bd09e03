"""``codegen apply SPECS --source CHECKOUT --in-place`` on a git repository made from the pinned
release's tree, with a small spec set (the project's telemetry.yaml and layers.yaml, and a span in
the flat form, whose end is a statement of its own) so that each run takes seconds.

The repository is built once for the module; each test starts from the commit holding the first
in-place apply (``reset``). One of the instrumented files is CRLF and executable in that repository.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from codegen.cli import main
from codegen.inplace import MANIFEST_NAME
from tests.support.git_repo import clone, git
from tests.support.paths import REPO, SPECS
from tests.support.pre_commit import HOOK_ARGS, pre_commit

LAYER = "megatron/core/transformer/transformer_layer.py"  # made CRLF and mode 0755
DDP = "megatron/core/distributed/distributed_data_parallel.py"  # the flat span
MANIFEST = f"megatron/core/otel/{MANIFEST_NAME}"
FLAT_SPEC = """\
# The gradient synchronization start in the flat form: no try, the end is a statement of its own.
form: flat
spans:
  - name: megatron.grad_sync.start
    group: communication
    file: megatron/core/distributed/distributed_data_parallel.py
    function: DistributedDataParallel.start_grad_sync
"""


def codegen(checkout: Path, *extra: str) -> tuple[int, str, str]:
    """``codegen apply specs/ --source . --in-place --docs docs/otel EXTRA`` in ``checkout``."""
    return _main_in(
        checkout, ["apply", "specs/", "--source", ".", "--in-place", "--docs", "docs/otel", *extra]
    )


def _main_in(checkout: Path, argv: list[str]) -> tuple[int, str, str]:
    """``codegen ARGV`` run from ``checkout``: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(checkout), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def succeeds(result: tuple[int, str, str]) -> tuple[str, str]:
    """The stdout and stderr of a ``codegen`` run that must exit 0."""
    rc, out, err = result
    assert rc == 0, out + err
    return out, err


def rename_mlp(root: Path, name: str = "megatron.layer.mlp_block") -> None:
    """The spec change most tests make: megatron.layer.mlp renamed in ``root``'s specs/layers.yaml."""
    layers = root / "specs" / "layers.yaml"
    layers.write_text(layers.read_text().replace("name: megatron.layer.mlp\n", f"name: {name}\n"))


def edit_outside_generated_lines(root: Path) -> bytes:
    """A user's comment in the instrumented transformer_layer.py (outside the generated lines)."""
    layer = root / LAYER
    edited = layer.read_bytes().replace(
        b"class TransformerLayer(", b"class TransformerLayer(  # mine\r\n    ", 1
    )
    layer.write_bytes(edited)
    return edited


def small_specs(dest: Path) -> None:
    dest.mkdir()
    shutil.copy(SPECS / "telemetry.yaml", dest / "telemetry.yaml")
    layers = (SPECS / "layers.yaml").read_text(encoding="utf-8")
    # the parent lives in pipeline.yaml, not part of this set
    (dest / "layers.yaml").write_text(layers.replace("    parents: [megatron.microbatch.forward]\n", ""))
    (dest / "ddp.yaml").write_text(FLAT_SPEC)


@pytest.fixture(scope="module")
def checkout(upstream: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clone with the specs committed, then the first in-place apply committed."""
    root = clone(upstream, tmp_path_factory.mktemp("in-place") / "Megatron-LM")
    layer = root / LAYER
    layer.write_bytes(layer.read_bytes().replace(b"\n", b"\r\n"))
    layer.chmod(0o755)
    small_specs(root / "specs")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "specs; transformer_layer.py CRLF and executable")
    out, _err = succeeds(codegen(root))
    assert f"+{4} -0  {DDP}" in out, out
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "instrumented")
    git(root, "tag", "instrumented")
    return root


@pytest.fixture
def repo(checkout: Path) -> Path:
    """The checkout back at the first in-place apply, whatever a test did."""
    git(checkout, "reset", "-q", "--hard", "instrumented")
    git(checkout, "clean", "-q", "-fdx")
    return checkout


def status(root: Path) -> str:
    return git(root, "status", "--porcelain", "--untracked-files=all")


def test_first_apply_instruments_the_files_and_writes_runtime_docs_and_manifest(repo: Path) -> None:
    changed = set(git(repo, "diff", "--name-only", "HEAD~1", "HEAD").split())
    assert {LAYER, DDP, "megatron/core/ssm/mamba_layer.py", "megatron/training/arguments.py"} <= changed
    assert {
        MANIFEST,
        "megatron/core/otel/__init__.py",
        "docs/otel/spans.md",
        "docs/otel/hierarchy.svg",
    } <= changed
    ddp = (repo / DDP).read_text().splitlines()
    start = ddp.index(
        '        _otel_span = _otel.COMMUNICATION and _otel.start_span("megatron.grad_sync.start")'
    )
    assert ddp[start + 3] == "        _otel_span and _otel_span.end()"
    assert "megatron.layer.mlp" in (repo / "docs/otel/spans.md").read_text()


def test_reapply_changes_nothing(repo: Path) -> None:
    stamp = {p: (repo / p).stat().st_mtime_ns for p in (LAYER, DDP, MANIFEST, "docs/otel/spans.md")}
    out, _err = succeeds(codegen(repo))
    assert "nothing to write" in out
    assert status(repo) == ""
    assert {p: (repo / p).stat().st_mtime_ns for p in stamp} == stamp


def test_crlf_and_file_mode_are_kept(repo: Path) -> None:
    data = (repo / LAYER).read_bytes()
    assert b"otel.start_span(" in data
    assert data.count(b"\n") == data.count(b"\r\n") > 1000
    assert stat.S_IMODE((repo / LAYER).stat().st_mode) == 0o755
    assert stat.S_IMODE((repo / DDP).stat().st_mode) == 0o644


def test_spec_change_check_fails_with_the_diff_then_apply_and_check_passes(repo: Path) -> None:
    rename_mlp(repo)
    before = status(repo)
    rc, out, err = codegen(repo, "--check")
    assert rc == 1, err
    assert f"--- a/{LAYER}\n+++ b/{LAYER}\n" in out
    assert re.search(
        r'^-\s+_otel_span_2 = _otel.LAYER and _otel.start_span\("megatron.layer.mlp"\)\r$', out, re.MULTILINE
    )
    assert re.search(
        r'^\+\s+_otel_span_2 = _otel.LAYER and _otel.start_span\("megatron.layer.mlp_block"\)\r$',
        out,
        re.MULTILINE,
    )
    assert "+++ b/docs/otel/spans.md" in out and "+++ b/megatron/core/otel/_taxonomy.py" in out
    assert MANIFEST not in out  # bookkeeping, not output
    assert (
        "differs from what specs give: run 'codegen apply specs/ --source . --in-place --docs docs/otel'"
        in err
    )
    assert status(repo) == before  # --check wrote nothing

    out, err = succeeds(codegen(repo))
    assert f"+1 -1  {LAYER}" in out and "docs/otel/spans.md" in out
    assert b'start_span("megatron.layer.mlp_block")\r\n' in (repo / LAYER).read_bytes()
    out, err = succeeds(codegen(repo, "--check"))


def test_dirty_touched_file_is_refused_and_nothing_is_written(repo: Path) -> None:
    rename_mlp(repo)
    layer = repo / LAYER
    edited = edit_outside_generated_lines(repo)
    before = {
        p: (repo / p).read_bytes()
        for p in (MANIFEST, "docs/otel/spans.md", "megatron/core/otel/_taxonomy.py")
    }
    rc, _out, err = codegen(repo)
    assert rc == 3
    assert f"error: {LAYER}: has uncommitted changes; commit or stash them first\n" in err
    assert err.count("uncommitted") == 1  # the other touched files are committed
    assert layer.read_bytes() == edited
    assert {p: (repo / p).read_bytes() for p in before} == before
    # the user says otherwise: their line is kept, the instrumentation follows the specs
    _out, err = succeeds(codegen(repo, "--allow-dirty"))
    data = layer.read_bytes()
    assert b"  # mine\r\n" in data and b'start_span("megatron.layer.mlp_block")' in data


def _rename_in_code(repo: Path) -> None:  # a hand edit inside the generated lines
    layer = repo / LAYER
    layer.write_bytes(
        layer.read_bytes().replace(b'start_span("megatron.layer.mlp")', b'start_span("my.mlp")')
    )


def _line_of(path: Path, text: str) -> int:
    lines = path.read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


def test_hand_edits_inside_generated_lines_are_reported_with_their_location(repo: Path) -> None:
    layer, ddp, spans_py = repo / LAYER, repo / DDP, repo / "megatron/core/otel/_spans.py"
    _rename_in_code(repo)
    renamed = _line_of(layer, '"my.mlp"')
    end = _line_of(ddp, "_otel_span and _otel_span.end()")
    lines = ddp.read_text().splitlines(keepends=True)
    del lines[end - 1]
    ddp.write_text("".join(lines))
    spans_py.write_text(spans_py.read_text().replace("def ", "def  ", 1))
    runtime_line = _line_of(spans_py, "def  ")
    git(repo, "commit", "-q", "-am", "hand edits")  # committed: the dirty guard does not apply
    edited = {p: (repo / p).read_bytes() for p in (LAYER, DDP)}

    rc, out, err = codegen(repo)
    assert rc == 3
    assert f"{LAYER}:{renamed}: error: generated lines edited by hand since the last apply" in err
    assert (
        f"{DDP}:{end}: error: '_otel_span and _otel_span.end()' removed by hand here since the last apply"
        in err
    )
    assert f"megatron/core/otel/_spans.py:{runtime_line}: error: generated file edited by hand" in err
    assert "refused: 3 hand edits inside generated lines would be overwritten" in err
    assert {p: (repo / p).read_bytes() for p in edited} == edited and status(repo) == ""

    rc, out, err = codegen(repo, "--check")
    assert rc == 1 and f"{LAYER}:{renamed}: error:" in err
    assert '+            _otel_span_2 = _otel.LAYER and _otel.start_span("megatron.layer.mlp")\r\n' in out

    out, err = succeeds(codegen(repo, "--discard-hand-edits"))
    assert f"{LAYER}:{renamed}: warning:" in err
    assert git(repo, "diff", "HEAD~1", "--stat") == ""  # back to what the specs give


def test_a_file_whose_spans_are_all_removed_is_stripped(repo: Path) -> None:
    (repo / "specs" / "ddp.yaml").unlink()
    out, _err = succeeds(codegen(repo))
    assert f"+0 -4  {DDP}" in out
    assert git(repo, "diff", "HEAD~1", "--", DDP) == ""  # as the release has it
    assert "megatron.grad_sync.start" not in (repo / "docs/otel/spans.md").read_text()


def test_outside_git_the_first_run_is_refused(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(repo, tree, ignore=shutil.ignore_patterns(".git"))
    rename_mlp(tree)
    (tree / MANIFEST).unlink()  # as if never applied in place here: no file is known to be ours
    before = (tree / LAYER).read_bytes()
    rc, _out, err = codegen(tree)
    assert rc == 3
    assert (
        f"error: {LAYER}: {tree.resolve()} is not in a git work tree and the file is not as the last" in err
    )
    assert (tree / LAYER).read_bytes() == before and not (tree / MANIFEST).exists()
    # the user says otherwise; from then on the manifest knows the files as ours
    assert codegen(tree, "--allow-dirty")[0] == 0
    assert b'start_span("megatron.layer.mlp_block")' in (tree / LAYER).read_bytes()
    layers = tree / "specs" / "layers.yaml"
    layers.write_text(layers.read_text().replace("megatron.layer.mlp_block", "megatron.layer.mlp"))
    _out, err = succeeds(codegen(tree))
    assert (tree / LAYER).read_bytes() == before


def test_options_that_need_in_place(repo: Path) -> None:
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["apply", "specs/", "--docs", "docs/otel"]) == 2
        assert main(["apply", "specs/", "--in-place"]) == 2
        assert main(["apply", "specs/", "--source", str(repo), "--in-place", "--docs", str(repo.parent)]) == 2
        assert (
            main(["apply", "specs/", "--source", str(repo), "--in-place", "--out", str(repo.parent / "x")])
            == 2
        )
    assert "--docs: only with --in-place" in err.getvalue()
    assert f"--docs {repo.parent}: not a folder inside the checkout {repo}" in err.getvalue()
    assert "--out does not go with it" in err.getvalue()
    assert "--in-place: name the checkout to instrument with --source CHECKOUT" in err.getvalue()


# -- the pre-commit hook, run by pre-commit itself ---------------------------------------------


def test_pre_commit_hook_passes_then_fails_on_a_spec_change(repo: Path, tmp_path: Path) -> None:
    """The manifest's hook as a ``repo: local`` hook with ``language: system`` (the installed
    codegen; pre-commit would otherwise install it from the network), its ``args`` overridden as
    the README says for the docs folder."""
    pytest.importorskip("pre_commit", reason="pre-commit is in the test extra (tox -e test)")
    hooks = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    hook = hooks["codegen-check-in-place"]
    assert hook["language"] == "python" and hook["entry"] == "codegen apply --check --in-place --source ."
    local = {**hook, "language": "system", "args": HOOK_ARGS}
    (repo / ".pre-commit-config.yaml").write_text(
        yaml.safe_dump({"repos": [{"repo": "local", "hooks": [local]}]})
    )
    git(repo, "add", ".pre-commit-config.yaml")
    home = tmp_path / "home"
    result = pre_commit("run", "--all-files", cwd=repo, home=home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the instrumented checkout agrees with its specs" in result.stdout and "Passed" in result.stdout

    rename_mlp(repo)
    git(repo, "add", "specs/layers.yaml")
    result = pre_commit("run", "--files", "specs/layers.yaml", cwd=repo, home=home)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Failed" in result.stdout and 'start_span("megatron.layer.mlp_block")' in result.stdout


HINT = re.compile(r"run '([^']+)'")


def _run_hint(repo: Path, command: str) -> tuple[int, str, str]:
    """A command a message told the user to run, run as written from the checkout."""
    words = shlex.split(command)
    assert words[0] == "codegen", command
    return _main_in(repo, words[1:])


def _hand_edit(repo: Path) -> None:
    _rename_in_code(repo)
    git(repo, "commit", "-q", "-am", "hand edit")


@pytest.mark.parametrize("way", ["discard", "move into the specs"])
def test_check_after_a_hand_edit_names_the_two_ways_out_and_each_succeeds(repo: Path, way: str) -> None:
    """--check after a hand edit inside generated lines prints two commands (the apply itself, once
    the edit is in the specs, and the apply with --discard-hand-edits); each, run as printed,
    succeeds, and the check passes after it (the bare apply the old hint named was refused)."""
    _hand_edit(repo)
    rc, _out, err = codegen(repo, "--check")
    assert rc == 1
    apply, discard = HINT.findall(err)
    assert apply == "codegen apply specs/ --source . --in-place --docs docs/otel", err
    assert discard == f"{apply} --discard-hand-edits", err
    assert "move it into the specs (or outside the generated lines)" in err
    if way == "discard":
        _out, err = succeeds(_run_hint(repo, discard))
        assert b'start_span("megatron.layer.mlp")' in (repo / LAYER).read_bytes()
    else:
        rc, _out, _err = _run_hint(repo, apply)  # not yet in the specs: refused, as the hint says
        assert rc == 3
        rename_mlp(repo, "my.mlp")
        git(repo, "commit", "-q", "-am", "the edit, in the specs")
        _out, err = succeeds(_run_hint(repo, apply))
        assert b'start_span("my.mlp")' in (repo / LAYER).read_bytes()
    git(repo, "commit", "-q", "-am", "applied")
    assert codegen(repo, "--check")[0] == 0


def test_check_with_uncommitted_changes_names_a_command_that_succeeds(repo: Path) -> None:
    """A spec change and an uncommitted edit (outside generated lines) in a file the apply would
    write: the check's command carries --allow-dirty, and succeeds as printed."""
    rename_mlp(repo)
    layer = repo / LAYER
    edit_outside_generated_lines(repo)
    rc, _out, err = codegen(repo, "--check")
    assert rc == 1
    (command,) = HINT.findall(err)
    assert command == "codegen apply specs/ --source . --in-place --docs docs/otel --allow-dirty", err
    assert "uncommitted changes (commit or stash them first" in err
    _out, err = succeeds(_run_hint(repo, command))
    assert (
        b"  # mine\r\n" in layer.read_bytes()
        and b'start_span("megatron.layer.mlp_block")' in layer.read_bytes()
    )


def test_refusals_name_commands_that_succeed(repo: Path) -> None:
    """The apply's own refusals (a hand edit; uncommitted changes) name the command that goes on."""
    _hand_edit(repo)
    rc, _out, err = codegen(repo)
    assert rc == 3
    (command,) = HINT.findall(err)
    assert command.endswith("--discard-hand-edits")
    assert _run_hint(repo, command)[0] == 0


def test_runtime_mode_switches_both_ways_and_checks(repo: Path) -> None:
    """Issue 32: --runtime dependency replaces the vendored runtime by the import shim (the
    taxonomy stays, the runtime's other modules go), --check agrees, and vendored brings them back;
    the instrumented call sites are the same in both modes."""
    otel = repo / "megatron/core/otel"
    vendored = sorted(p.name for p in otel.glob("*.py"))
    layer = (repo / LAYER).read_bytes()
    succeeds(codegen(repo, "--runtime", "dependency"))
    assert sorted(p.name for p in otel.glob("*.py")) == ["__init__.py", "_taxonomy.py"]
    assert "megatron_otel_runtime" in (otel / "__init__.py").read_text()
    assert (repo / LAYER).read_bytes() == layer
    succeeds(codegen(repo, "--runtime", "dependency", "--check"))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "dependency mode")
    rc, out, _err = codegen(repo, "--check")  # the vendored default differs from the checkout now
    assert rc == 1 and "megatron/core/otel/_spans.py" in out
    succeeds(codegen(repo))
    assert sorted(p.name for p in otel.glob("*.py")) == vendored
    git(repo, "add", "-A")
    assert git(repo, "diff", "--cached", "--name-only", "instrumented", "--", "megatron") == ""
