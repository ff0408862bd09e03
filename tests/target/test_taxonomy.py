"""All 55 span sites of the reference taxonomy, checked in the generated patch set itself.

The expectations are transcribed from shared/reference/megatron-otel-taxonomy.md, not read from
specs/: each row names the span, its group, the function, and (as an independent oracle over the
pristine source) the statements it must cover. A spec that drifts from the taxonomy fails here.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from codegen.pipeline import Generation
from tests.support.spans_in_code import FoundSpan, assigned, calls, deinstrument, find_spans

DDP = "megatron/core/distributed/distributed_data_parallel.py"
OFFLOAD = "megatron/core/pipeline_parallel/fine_grained_activation_offload.py"
P2P = "megatron/core/pipeline_parallel/p2p_communication.py"
SCHEDULES = "megatron/core/pipeline_parallel/schedules.py"
MAMBA = "megatron/core/ssm/mamba_layer.py"
LAYER = "megatron/core/transformer/transformer_layer.py"
CKPT = "megatron/training/checkpointing.py"
TRAINING = "megatron/training/training.py"

Oracle = Callable[[ast.FunctionDef], list[ast.stmt]]


# -- the oracle: statements of the pristine function, found with plain ast -----------------------


def _statements(f: ast.FunctionDef) -> list[tuple[ast.stmt, list[ast.stmt], list[ast.stmt]]]:
    """(statement, its block, its enclosing compound statements) in source order."""
    out: list[tuple[ast.stmt, list[ast.stmt], list[ast.stmt]]] = []

    def walk(block: list[ast.stmt], outer: list[ast.stmt]) -> None:
        for stmt in block:
            out.append((stmt, block, outer))
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                continue
            for attr in ("body", "orelse", "finalbody"):
                child = getattr(stmt, attr, None)
                if isinstance(child, list) and child and isinstance(child[0], ast.stmt):
                    walk(child, outer + [stmt])
            for handler in getattr(stmt, "handlers", []) or []:
                walk(handler.body, outer + [stmt])

    walk(f.body, [])
    return out


def _header(stmt: ast.stmt) -> str:
    if isinstance(stmt, (ast.If, ast.While)):
        return ast.unparse(stmt.test)
    if isinstance(stmt, ast.For):
        return f"{ast.unparse(stmt.target)} in {ast.unparse(stmt.iter)}"
    return ""


def _pick(found: list, occurrence: int | None) -> object:
    if occurrence is None:
        assert len(found) == 1, f"oracle is ambiguous: {len(found)} candidates"
        return found[0]
    return found[occurrence - 1]


def _finder(
    test: Callable[[ast.stmt], bool], occurrence: int | None = None, inside: str | None = None
) -> Callable:
    """The ``(statement, its block)`` passing ``test`` (the ``occurrence``-th, else the only one),
    within a compound statement whose header starts with ``inside`` when given."""

    def find(f: ast.FunctionDef) -> tuple[ast.stmt, list[ast.stmt]]:
        hits = [
            (s, b)
            for s, b, outer in _statements(f)
            if test(s) and (inside is None or any(_header(o).startswith(inside) for o in outer))
        ]
        return _pick(hits, occurrence)  # type: ignore[return-value]

    return find


def calling(callee: str, occurrence: int | None = None, inside: str | None = None) -> Callable:
    return _finder(lambda s: not hasattr(s, "body") and callee in calls(s), occurrence, inside)


def assigning(name: str) -> Callable:
    return _finder(lambda s: name in assigned(s))


def compound(kind: type, prefix: str, occurrence: int | None = None, inside: str | None = None) -> Callable:
    return _finder(lambda s: isinstance(s, kind) and _header(s).startswith(prefix), occurrence, inside)


def whole(f: ast.FunctionDef) -> list[ast.stmt]:
    body = f.body
    return (
        body[1:]
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        else body
    )


def one(finder: Callable) -> Oracle:
    return lambda f: [finder(f)[0]]


def run(first: Callable, last: Callable) -> Oracle:
    def oracle(f: ast.FunctionDef) -> list[ast.stmt]:
        (a, block), (b, other) = first(f), last(f)
        assert block is other
        return block[block.index(a) : block.index(b) + 1]

    return oracle


def after(finder: Callable) -> Oracle:
    def oracle(f: ast.FunctionDef) -> list[ast.stmt]:
        stmt, block = finder(f)
        return block[block.index(stmt) + 1 :]

    return oracle


def else_body(finder: Callable) -> Oracle:
    return lambda f: finder(f)[0].orelse


def body_of(finder: Callable) -> Oracle:
    return lambda f: finder(f)[0].body


@dataclass(frozen=True)
class Row:
    number: int
    name: str
    group: str
    file: str
    function: str
    covers: Oracle
    goodput: bool = False
    attributes: tuple[str, ...] = ()
    end_attributes: tuple[str, ...] = ()
    parent: str | None = None  # the enclosing span in the same function


def at(file: str, function: str, **shared: Any) -> Callable[..., Row]:
    """Rows of one function: ``row(number, name, group, covers, **fields)``, ``shared`` fields set."""

    def row(number: int, name: str, group: str, covers: Oracle, **fields: Any) -> Row:
        return Row(number, name, group, file, function, covers, **{**shared, **fields})

    return row


LOOP = "iteration < args.train_iters"  # the training loop of train()
STEP = else_body(compound(ast.If, "args.skip_train", inside=LOOP))  # the work of one iteration
MANUAL_GC = "args.manual_gc_interval != 0"
CUDA_GRAPHS = "args.cuda_graph_impl == 'transformer_engine' and (not cuda_graph_helper.capture_finished())"
ITERATION = ("megatron.iteration",)
LAYER_NUMBER = ("megatron.layer_number",)
mamba = at(MAMBA, "MambaLayer.forward")
attention = at(LAYER, "TransformerLayer._forward_attention")
layer = at(LAYER, "TransformerLayer.forward")
save = at(CKPT, "save_checkpoint", goodput=True)
load = at(CKPT, "load_checkpoint", goodput=True)
pretrain = at(TRAINING, "pretrain", goodput=True)
setup = at(TRAINING, "setup_model_and_optimizer", goodput=True)
train_step = at(TRAINING, "train_step")
exposed = at(TRAINING, "save_checkpoint_and_time", goodput=True, parent="megatron.checkpoint.exposed_save")
sniff = at(TRAINING, "_run_gpu_sniff_test", goodput=True)
callbacks = at(TRAINING, "post_training_step_callbacks", goodput=True)
train = at(TRAINING, "train", goodput=True)
iteration = at(TRAINING, "train", goodput=True, attributes=ITERATION)
report = at(TRAINING, "train", goodput=True, parent="megatron.train.iteration_report")
evaluate = at(TRAINING, "evaluate")
ROWS = [
    Row(
        1, "megatron.grad_sync.start", "communication", DDP, "DistributedDataParallel.start_grad_sync", whole
    ),
    Row(
        2,
        "megatron.grad_sync.finish",
        "communication",
        DDP,
        "DistributedDataParallel.finish_grad_sync",
        whole,
    ),
    Row(
        3, "megatron.activation.offload", "activation_offload", OFFLOAD, "ChunkOffloadHandler.offload", whole
    ),
    Row(4, "megatron.activation.reload", "activation_offload", OFFLOAD, "ChunkOffloadHandler.reload", whole),
    Row(5, "megatron.p2p.recv_forward", "communication", P2P, "P2PCommunicator.recv_forward", whole),
    Row(6, "megatron.p2p.recv_backward", "communication", P2P, "P2PCommunicator.recv_backward", whole),
    Row(7, "megatron.p2p.send_forward", "communication", P2P, "P2PCommunicator.send_forward", whole),
    Row(8, "megatron.p2p.send_backward", "communication", P2P, "P2PCommunicator.send_backward", whole),
    Row(9, "megatron.microbatch.forward", "microbatch", SCHEDULES, "forward_step", whole),
    Row(10, "megatron.microbatch.backward", "microbatch", SCHEDULES, "backward_step", whole),
    mamba(
        11, "megatron.layer.forward", "layer", after(assigning("inference_context")), attributes=LAYER_NUMBER
    ),
    mamba(12, "megatron.layer.mamba", "layer", one(calling("self.mixer")), parent="megatron.layer.forward"),
    attention(13, "megatron.layer.self_attention", "layer", one(calling("self.self_attention"))),
    layer(14, "megatron.layer.forward", "layer", whole, attributes=LAYER_NUMBER),
    layer(
        15, "megatron.layer.mlp", "layer", one(calling("self._forward_mlp")), parent="megatron.layer.forward"
    ),
    save(16, "megatron.checkpoint.save.state_dict", "checkpoint", one(calling("generate_state_dict"))),
    save(17, "megatron.checkpoint.save.io_write", "checkpoint", one(calling("dist_checkpointing.save"))),
    load(18, "megatron.checkpoint.load.io_read", "load_checkpoint", one(calling("_load_base_checkpoint", 2))),
    pretrain(29, "megatron.startup.model_init", "model_init", one(calling("setup_model_and_optimizer"))),
    pretrain(
        30,
        "megatron.startup.dataloader",
        "data_loading",
        one(compound(ast.If, "args.virtual_pipeline_model_parallel_size is not None")),
    ),
    setup(
        31,
        "megatron.checkpoint.load",
        "load_checkpoint",
        run(assigning("ckpt_pgc"), calling("load_checkpoint")),
    ),
    train_step(
        32,
        "megatron.train.iteration.forward_backward",
        "forward_backward",
        one(assigning("losses_reduced")),
        attributes=("num_microbatches",),
    ),
    train_step(
        33,
        "megatron.train.iteration.optimizer",
        "optimizer",
        one(calling("optimizer.step")),
        end_attributes=("megatron.update_successful",),
    ),
    exposed(34, "megatron.checkpoint.exposed_save", "checkpoint", whole, attributes=ITERATION, parent=None),
    exposed(
        35, "megatron.checkpoint.reclaim_memory", "checkpoint", one(compound(ast.For, "model_chunk in model"))
    ),
    exposed(
        36,
        "megatron.checkpoint.save",
        "checkpoint",
        run(calling("save_checkpoint"), assigning("save_checkpoint_duration")),
        attributes=ITERATION,
    ),
    exposed(37, "megatron.checkpoint.report_memory", "checkpoint", one(calling("report_memory", 2))),
    exposed(
        38, "megatron.checkpoint.gc_collect", "checkpoint", one(calling("gc.collect", inside="args.fp8"))
    ),
    # The reference put timers_log in `step` (a defect, taxonomy section 6); it is a checkpoint span.
    exposed(39, "megatron.checkpoint.timers_log", "checkpoint", one(calling("timers.log"))),
    sniff(40, "megatron.startup.sniff_test", "job", whole, attributes=("megatron.sniff_test.tag",)),
    callbacks(41, "megatron.train.gc_collect", "step", one(calling("gc.collect", inside=MANUAL_GC))),
    train(
        42,
        "megatron.startup.weight_hash_check",
        "job",
        run(
            calling("check_param_hashes_across_dp_replicas"),
            calling("torch.distributed.barrier", inside="args.check_weight_hash"),
        ),
    ),
    train(
        44,
        "megatron.checkpoint.ft_heartbeat",
        "checkpoint",
        one(calling("ft_integration.on_checkpointing_start", 1, inside=LOOP)),
    ),
    train(
        45,
        "megatron.checkpoint.save.finalize",
        "checkpoint",
        one(calling("maybe_finalize_async_save", inside=LOOP)),
    ),
    iteration(46, "megatron.train.cuda_graph_capture", "job", body_of(compound(ast.If, CUDA_GRAPHS))),
    iteration(
        47, "megatron.train.first_iteration", "first_iteration", STEP, parent="megatron.train.iteration"
    ),
    iteration(48, "megatron.train.iteration", "step", STEP, end_attributes=("megatron.skipped",)),
    train(
        49,
        "megatron.train.forward_pre_hook",
        "first_iteration",
        one(calling("enable_forward_pre_hook", inside="iteration == start_iteration")),
    ),
    train(
        50,
        "megatron.train.iteration_report",
        "step",
        run(
            compound(ast.If, "optimizer is not None and (not optimizer.is_stub_optimizer)"),
            calling("training_log"),
        ),
    ),
    report(51, "megatron.train.params_norm", "step", one(calling("calc_params_l2_norm"))),
    report(52, "megatron.train.log", "step", one(calling("training_log"))),
    train(
        53, "megatron.checkpoint.exit_finalize", "checkpoint", one(calling("maybe_finalize_async_save", 2))
    ),
    evaluate(54, "megatron.evaluate", "evaluate", whole),
    evaluate(
        55,
        "megatron.evaluate.step",
        "evaluate",
        one(assigning("loss_dicts")),
        attributes=("megatron.eval_iteration",),
        parent="megatron.evaluate",
    ),
]
# Rows the runtime emits (lifecycle), with their group; all are goodput spans.
RUNTIME_ROWS = {
    19: ("pre_startup", "job"),
    20: ("megatron.startup", "job"),
    21: ("megatron.startup.launch_script", "job"),
    22: ("megatron.startup.container_load", "job"),
    23: ("megatron.startup.imports", "job"),
    24: ("megatron.startup.arg_parse", "job"),
    25: ("megatron.startup.inprocess_setup", "job"),
    26: ("megatron.startup.in_job_setup", "job"),
    27: ("megatron.startup.initialize_megatron", "job"),
    28: ("megatron.startup.jit_fusion_options", "job"),
    43: ("megatron.train", "job"),
}
ALIAS = "_otel"  # the name the generated code imports the runtime as


def test_every_taxonomy_row_is_covered() -> None:
    assert sorted([r.number for r in ROWS] + list(RUNTIME_ROWS)) == list(range(1, 56))


@pytest.fixture(scope="module")
def found(generation: Generation) -> dict[str, list[FoundSpan]]:
    return {path: find_spans(new, ALIAS) for path, (_, new) in generation.changes.items()}


def _function(source: str, qualname: str) -> ast.FunctionDef:
    node: ast.AST = ast.parse(source)
    for part in qualname.split("."):
        node = next(n for n in node.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)  # type: ignore[attr-defined]
    assert isinstance(node, ast.FunctionDef)
    return node


def _without_hooks(stmts: list[ast.stmt]) -> list[str]:
    """Statement dumps with every other instrumentation construct removed, at any depth."""
    return [ast.dump(s) for s in deinstrument(stmts, ALIAS)]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"row{r.number}-{r.name}")
def test_row(row: Row, generation: Generation, found: dict[str, list[FoundSpan]]) -> None:
    candidates = [s for s in found.get(row.file, []) if row.name in s.names and s.function == row.function]
    assert len(candidates) == 1, (
        f"row {row.number}: {row.name} found {len(candidates)} times in {row.file}:{row.function}"
    )
    span = candidates[0]
    if span.form == "decorator":
        runtime = _runtime_source(generation)
        assert re.search(rf'"{re.escape(row.name)}": Span\("{row.group}", {row.goodput}\)', runtime)
    else:
        assert span.flag == row.group.upper(), f"row {row.number}: group flag {span.flag}"
    assert tuple(span.attributes) == row.attributes
    assert tuple(span.end_attributes) == row.end_attributes
    assert span.parent == ((row.parent,) if row.parent else None)

    pristine = _function(generation.changes[row.file][0] or "", row.function)
    expected = row.covers(pristine)
    assert _without_hooks(span.body) == _without_hooks(expected), (
        f"row {row.number}: covered statements differ"
    )


def _runtime_source(generation: Generation) -> str:
    package = generation.project.runtime.package
    return "".join(new for path, (_, new) in generation.changes.items() if path.startswith(package + "/"))


@pytest.mark.parametrize("number", sorted(RUNTIME_ROWS), ids=lambda n: f"row{n}-{RUNTIME_ROWS[n][0]}")
def test_runtime_row(number: int, generation: Generation) -> None:
    name, group = RUNTIME_ROWS[number]
    assert re.search(rf'"{re.escape(name)}": Span\("{group}", True\)', _runtime_source(generation)), name


def test_goodput_flags_in_the_runtime_table(generation: Generation) -> None:
    runtime = _runtime_source(generation)
    for row in ROWS:
        assert re.search(rf'"{re.escape(row.name)}": Span\("{row.group}", {row.goodput}\)', runtime), row.name


def test_sniff_test_name_is_chosen_at_run_time(found: dict[str, list[FoundSpan]]) -> None:
    (span,) = [s for s in found[TRAINING] if s.function == "_run_gpu_sniff_test"]
    assert set(span.names) == {"megatron.startup.sniff_test", "megatron.train.sniff_test"}


def test_first_iteration_is_conditional(found: dict[str, list[FoundSpan]]) -> None:
    (span,) = [s for s in found[TRAINING] if s.name == "megatron.train.first_iteration"]
    assert span.condition == '_otel.first_time("megatron.train.first_iteration")'.replace('"', "'")


# The inference server's spans (specs/inference.yaml, issue 40): beyond the reference taxonomy,
# which #6438 left without the dynamic server's (its inference spans were reverted).
SERVING = (
    "text_completion",
    "megatron.inference.tokenize",
    "megatron.inference.engine",
    "megatron.inference.format",
    "chat",
    "megatron.inference.chat_template",
    "megatron.inference.chat_engine",
    "megatron.inference.chat_format",
)
# The dynamic engine's step (specs/inference_engine.yaml, issue 40 item 3): CUDA to run, so its
# placement is what CPU can check.
ENGINE = "megatron/core/inference/engines/dynamic_engine.py"
ENGINE_SPANS = ("megatron.inference.step",)


def test_each_name_is_emitted_only_where_the_taxonomy_puts_it(found: dict[str, list[FoundSpan]]) -> None:
    emitted = Counter(name for spans in found.values() for s in spans for name in s.names)
    expected = Counter(r.name for r in ROWS) + Counter({"megatron.train.sniff_test": 1}) + Counter(SERVING)
    assert emitted == expected + Counter(ENGINE_SPANS)


def test_the_engine_step_is_placed_on_async_step_with_its_hook_after_the_forward(
    generation: Generation, found: dict[str, list[FoundSpan]]
) -> None:
    """One span per engine step, the whole of ``async_step`` (every way the engine steps awaits
    it), in the inference_steps group; ``engine_step(self.context)`` right after the forward's
    ``result = controller_result.output``, guarded by the same group; nothing else in the file."""
    (span,) = found[ENGINE]
    assert (span.name, span.function, span.form) == (
        "megatron.inference.step",
        "DynamicInferenceEngine.async_step",
        "decorator",
    )
    # a decorator span reads its group from the taxonomy table
    assert '"megatron.inference.step": Span("inference_steps", False)' in _runtime_source(generation)
    old, new = generation.changes[ENGINE]
    (engine,) = [n for n in ast.parse(new).body if getattr(n, "name", "") == "DynamicInferenceEngine"]
    (forward,) = [n for n in engine.body if getattr(n, "name", "") == "async_forward"]  # type: ignore[attr-defined]
    lines = [ast.unparse(stmt) for stmt in forward.body]
    result_at = lines.index("result = controller_result.output")
    assert lines[result_at + 1] == f"{ALIAS}.INFERENCE_STEPS and {ALIAS}.engine_step(self.context)"
    assert [line.strip() for line in _added(old, new)] == [
        f"import megatron.core.otel as {ALIAS}",
        f"{ALIAS}.INFERENCE_STEPS and {ALIAS}.engine_step(self.context)",
        f'@{ALIAS}.traced("megatron.inference.step")',
    ]


def test_training_py_footprint(generation: Generation) -> None:
    """The reference added 1,033 lines to training.py; the issue allows at most 150."""
    added = len(_added(*generation.changes[TRAINING]))
    assert added <= 150, added


def _added(old: str | None, new: str) -> list[str]:
    """The lines a change adds to a file."""
    diff = difflib.unified_diff((old or "").splitlines(), new.splitlines(), lineterm="", n=0)
    return [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
