"""Files are preserved byte for byte: CRLF line endings and a UTF-8 byte order mark survive the
codemod, and the patch still applies to the original bytes with ``git apply``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from codegen.pipeline import generate
from tests.generator.support import DEMO, make_project
from tests.support.paths import CASES
from tests.support.transform_cases import CHANGED, expected_output, read


def _generate(tmp_path: Path, case: Path, source: bytes) -> str:
    specs, root = make_project(tmp_path, read(case, "spec.yaml"), None)
    (root / DEMO).write_bytes(source)
    return generate(specs, root).changes[DEMO][1]


@pytest.mark.parametrize("case", CHANGED, ids=lambda p: p.name)  # not refusals, no-ops
def test_crlf_and_bom_are_kept(case: Path, tmp_path: Path) -> None:
    source = read(case, "input.py")
    expected = expected_output(case)
    crlf = source.replace("\n", "\r\n").encode("utf-8")
    assert _generate(tmp_path / "crlf", case, crlf) == expected.replace("\n", "\r\n")
    assert _generate(tmp_path / "bom", case, b"\xef\xbb\xbf" + source.encode()) == "\ufeff" + expected


def test_crlf_patch_applies_with_git(tmp_path: Path) -> None:
    case = CASES / "hooks"
    source = b"\xef\xbb\xbf" + (case / "input.py").read_text(encoding="utf-8").replace("\n", "\r\n").encode()
    specs, root = make_project(tmp_path, (case / "spec.yaml").read_text(encoding="utf-8"), None)
    (root / DEMO).write_bytes(source)
    generation = generate(specs, root)
    patch = [text for name, text in generation.generated.items() if name.endswith("megatron-demo.py.patch")]
    tree = tmp_path / "tree"
    (tree / "megatron").mkdir(parents=True)
    (tree / DEMO).write_bytes(source)
    (tmp_path / "demo.patch").write_bytes(patch[0].encode("utf-8"))
    subprocess.run(["git", "apply", "--unsafe-paths", str(tmp_path / "demo.patch")], cwd=tree, check=True)
    assert (tree / DEMO).read_bytes() == generation.changes[DEMO][1].encode("utf-8")
    # and the instrumented CRLF file is recognised as such: applying again changes nothing
    (root / DEMO).write_bytes((tree / DEMO).read_bytes())
    assert DEMO not in generate(specs, root).changes
    assert b"\r\n" in (tree / DEMO).read_bytes() and b"\n" not in (tree / DEMO).read_bytes().replace(
        b"\r\n", b""
    )
