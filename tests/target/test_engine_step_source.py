"""What ``engine_step`` reads from the dynamic engine's context is there, on the pinned release
and on Megatron-LM main (issue 40 item 3): the engine needs CUDA to step, so CPU checks the names
in the source that ``tests/runtime_pkg/test_engine_step.py``'s stand-in context carries —
``InferenceBatchDimensions``' three counts, ``DynamicInferenceContext``'s ``batch_dimensions``,
``num_speculative_tokens`` and ``kv_block_allocator``, and the allocator's ``get_total_used``, a
host-side subtraction (no tensor, so no device sync per step)."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

from codegen.diagnostics import Diagnostics
from codegen.spec.load import load_project
from codegen.target import locate_tree
from tests.support.paths import SPECS
from tests.support.upstream_main import snapshot

INFERENCE = "megatron/core/inference/"


def _release() -> Path:
    return locate_tree(load_project(SPECS, Diagnostics())).root


@pytest.mark.parametrize("tree", ["0.19.2", "main"])
def test_the_context_has_what_engine_step_reads(tree: str) -> None:
    root = _release() if tree == "0.19.2" else snapshot("minus")
    files = ("batch_dimensions_utils.py", "contexts/dynamic_context.py", "contexts/kv_block_allocator.py")
    with warnings.catch_warnings():
        # upstream's own invalid escapes in docstrings: not this test's finding
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", SyntaxWarning)
        source = {name: ast.parse((root / INFERENCE / name).read_text(encoding="utf-8")) for name in files}
    (dims,) = [
        n
        for n in ast.walk(source["batch_dimensions_utils.py"])
        if isinstance(n, ast.ClassDef) and n.name == "InferenceBatchDimensions"
    ]
    fields = {
        n.target.id for n in dims.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert {"token_count", "prefill_req_count", "decode_req_count"} <= fields
    assigned = {
        t.attr
        for n in ast.walk(source["contexts/dynamic_context.py"])
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }
    assert {"batch_dimensions", "num_speculative_tokens", "kv_block_allocator"} <= assigned
    (used,) = [
        n
        for n in ast.walk(source["contexts/kv_block_allocator.py"])
        if isinstance(n, ast.FunctionDef) and n.name == "get_total_used"
    ]
    (returned,) = [n for n in used.body if isinstance(n, ast.Return)]
    # pool (or total) size - free count - 1: plain ints, no tensor
    assert isinstance(returned.value, ast.BinOp) and not [
        n for n in ast.walk(returned.value) if isinstance(n, ast.Call)
    ], ast.unparse(returned)
