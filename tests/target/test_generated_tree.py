"""generated/ is exactly what the specs produce for megatron-core 0.19.2, and it is usable."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from codegen.atomic import write_files
from codegen.pipeline import Generation, generate
from tests.support.paths import REPO, SPECS
from tests.support.serving_files import SERVING_FILES, instrumented


def _as_dir(tree: dict[str, str]) -> dict[str, object]:
    nested: dict[str, object] = {}
    for name, text in tree.items():
        *dirs, leaf = name.split("/")
        node = nested
        for d in dirs:
            node = node.setdefault(d, {})  # type: ignore[assignment]
        node[leaf] = text
    return nested


def test_generated_matches_specs(generation: Generation, snapshot) -> None:
    """The committed generated/ is the snapshot: regenerate with `codegen apply specs/`."""
    snapshot.snapshot_dir = REPO
    snapshot.assert_match_dir(_as_dir(generation.generated_tree()), "generated")


def _series(generation: Generation) -> list[Path]:
    patches = REPO / "generated" / "patches"
    return [patches / name for name in (patches / "series").read_text().split()]


def test_the_patch_set_covers_the_server_and_the_engine(generation: Generation) -> None:
    """Issue 40: the inference server's modules and the dynamic engine's have their patches in the
    series, each the file's instrumented text."""
    patched = {}
    for patch in _series(generation):
        for line in patch.read_text(encoding="utf-8").splitlines():
            if line.startswith("+++ b/"):
                patched[line[6:]] = patch
    assert set(SERVING_FILES) <= set(patched), sorted(set(SERVING_FILES) - set(patched))
    for path in SERVING_FILES:
        added = "\n".join(
            line[1:]
            for line in patched[path].read_text(encoding="utf-8").splitlines()
            if line.startswith("+")
        )
        assert instrumented(path, added), path
        assert instrumented(path, generation.changes[path][1]), path  # the fork's text (--out)


def test_patches_apply_with_git_and_compile(generation: Generation, patched_tree: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=patched_tree, check=True)
    for patch in _series(generation):
        subprocess.run(["git", "apply", "--check", str(patch)], cwd=patched_tree, check=True)
        subprocess.run(["git", "apply", str(patch)], cwd=patched_tree, check=True)
    for path in generation.changes:
        source = (patched_tree / path).read_text(encoding="utf-8")
        assert source == generation.changes[path][1]
        compile(source, path, "exec")


def test_patches_apply_with_patch_p1(generation: Generation, tmp_path: Path) -> None:
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    shutil.copytree(generation.source_root / "megatron", tmp_path / "megatron")
    for patch in _series(generation):
        subprocess.run(["patch", "-p1", "--fuzz=0", "-s", "-i", str(patch)], cwd=tmp_path, check=True)
    for path, (_, new) in generation.changes.items():
        assert (tmp_path / path).read_text(encoding="utf-8") == new


def test_applying_to_the_patched_tree_changes_nothing(generation: Generation, tmp_path: Path) -> None:
    shutil.copytree(generation.source_root / "megatron", tmp_path / "megatron")
    write_files(tmp_path, {path: new for path, (_, new) in generation.changes.items()})
    again = generate(SPECS, tmp_path)
    assert again.changes == {}
    assert again.generated_tree()["docs/spans.md"] == generation.generated_tree()["docs/spans.md"]


def test_untouched_files_are_not_in_the_patch_set(generation: Generation) -> None:
    touched = {s.file for s in (*generation.project.spans, *generation.project.hooks)} | {
        p for p in generation.changes if p.startswith(generation.project.runtime.package + "/")
    }
    assert set(generation.changes) == touched


def test_generated_lines_fit_megatron_line_length(generation: Generation) -> None:
    """Every line over 100 columns in a patched file was already there, unchanged: generated
    lines fit, and re-indented ones are laid out again when they no longer do."""
    for path, (old, new) in generation.changes.items():
        original = set((old or "").splitlines())
        for number, line in enumerate(new.splitlines(), 1):
            if len(line) > 100:
                assert line in original, f"{path}:{number}: {len(line)} columns"
        ast.parse(new)
