"""Rows 1-15 of the reference taxonomy, checked in the generated code itself.

The expectations below are transcribed from shared/reference/megatron-otel-taxonomy.md, not read
from specs/, so a spec that drifts from the taxonomy fails here.
"""

from __future__ import annotations

import ast
import re
from collections import Counter

import pytest

from codegen.pipeline import Generation
from tests.target.spans_in_code import FoundSpan, calls, find_spans

DDP = "megatron/core/distributed/distributed_data_parallel.py"
OFFLOAD = "megatron/core/pipeline_parallel/fine_grained_activation_offload.py"
P2P = "megatron/core/pipeline_parallel/p2p_communication.py"
SCHEDULES = "megatron/core/pipeline_parallel/schedules.py"
MAMBA = "megatron/core/ssm/mamba_layer.py"
LAYER = "megatron/core/transformer/transformer_layer.py"

WHOLE = "whole function"
# (row, span name, group, file, function, covers, parent span)
ROWS = [
    (1, "megatron.grad_sync.start", "communication", DDP, "DistributedDataParallel.start_grad_sync", WHOLE, None),
    (2, "megatron.grad_sync.finish", "communication", DDP, "DistributedDataParallel.finish_grad_sync", WHOLE, None),
    (3, "megatron.activation.offload", "activation_offload", OFFLOAD, "ChunkOffloadHandler.offload", WHOLE, None),
    (4, "megatron.activation.reload", "activation_offload", OFFLOAD, "ChunkOffloadHandler.reload", WHOLE, None),
    (5, "megatron.p2p.recv_forward", "communication", P2P, "P2PCommunicator.recv_forward", WHOLE, None),
    (6, "megatron.p2p.recv_backward", "communication", P2P, "P2PCommunicator.recv_backward", WHOLE, None),
    (7, "megatron.p2p.send_forward", "communication", P2P, "P2PCommunicator.send_forward", WHOLE, None),
    (8, "megatron.p2p.send_backward", "communication", P2P, "P2PCommunicator.send_backward", WHOLE, None),
    (9, "megatron.microbatch.forward", "microbatch", SCHEDULES, "forward_step", WHOLE, None),
    (10, "megatron.microbatch.backward", "microbatch", SCHEDULES, "backward_step", WHOLE, None),
    (11, "megatron.layer.forward", "layer", MAMBA, "MambaLayer.forward", "after inference_context", None),
    (12, "megatron.layer.mamba", "layer", MAMBA, "MambaLayer.forward", "call self.mixer", "megatron.layer.forward"),
    (13, "megatron.layer.self_attention", "layer", LAYER, "TransformerLayer._forward_attention", "call self.self_attention", None),
    (14, "megatron.layer.forward", "layer", LAYER, "TransformerLayer.forward", WHOLE, None),
    (15, "megatron.layer.mlp", "layer", LAYER, "TransformerLayer.forward", "call self._forward_mlp", "megatron.layer.forward"),
]
ATTRIBUTES = {11: {"megatron.layer_number": "self.layer_number"}, 14: {"megatron.layer_number": "self.layer_number"}}


@pytest.fixture(scope="module")
def found(generation: Generation) -> dict[str, list[FoundSpan]]:
    alias = generation.project.runtime.alias
    return {path: find_spans(new, alias) for path, (_, new) in generation.changes.items()}


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _attributes(generation: Generation, span: FoundSpan, path: str) -> dict[str, str]:
    start = span.enclosing_block[span.index]
    call = start.value.values[-1]  # type: ignore[attr-defined]
    if len(call.args) < 2:
        return {}
    lam = call.args[1]
    assert isinstance(lam, ast.Lambda) and isinstance(lam.body, ast.Dict)
    return {ast.literal_eval(k): ast.unparse(v) for k, v in zip(lam.body.keys, lam.body.values)}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"row{r[0]}-{r[1]}")
def test_row(row: tuple, generation: Generation, found: dict[str, list[FoundSpan]]) -> None:
    number, name, group, path, function, covers, parent = row
    candidates = [s for s in found.get(path, []) if s.name == name and s.function == function]
    assert len(candidates) == 1, f"row {number}: {name} not found once in {path}:{function}"
    span = candidates[0]
    assert span.flag == group.upper()
    assert span.parent == parent
    assert _attributes(generation, span, path) == ATTRIBUTES.get(number, {})

    block = span.enclosing_block
    if covers == WHOLE:
        leading = block[: span.index]
        assert all(_is_docstring(s) for s in leading) and len(leading) <= 1
        assert span.index + 2 == len(block), "the span must run to the end of the function"
    elif covers.startswith("after "):
        variable = covers.split()[1]
        previous = block[span.index - 1]
        assert isinstance(previous, ast.Assign) and ast.unparse(previous.targets[0]) == variable
        assert span.index + 2 == len(block)
        assert isinstance(span.body[-1], ast.Return)
    else:
        callee = covers.split()[1]
        assert len(span.body) == 1 and callee in calls(span.body[0])


def test_each_name_appears_only_where_the_taxonomy_puts_it(found: dict[str, list[FoundSpan]]) -> None:
    emitted = Counter(s.name for spans in found.values() for s in spans)
    assert emitted == Counter(name for _, name, *_ in ROWS)


def test_runtime_table_assigns_each_name_its_group(generation: Generation) -> None:
    runtime = next(new for path, (_, new) in generation.changes.items() if path.endswith("otel/__init__.py"))
    for _, name, group, *_ in ROWS:
        assert re.search(rf'"{re.escape(name)}": \("{group}", (True|False)\)', runtime), name


def test_docs_list_each_span_once_per_site(generation: Generation) -> None:
    page = generation.docs["spans.md"]
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    listed = Counter(re.match(r"\| `([^`]+)`", line).group(1) for line in rows)  # type: ignore[union-attr]
    assert listed == Counter(name for _, name, *_ in ROWS)
    for _, name, group, path, function, *_ in ROWS:
        assert any(f"`{name}` | {group} | `{path}` | `{function}`" in line for line in rows), name
