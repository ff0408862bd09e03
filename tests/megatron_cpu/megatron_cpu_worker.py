"""Runs a tiny megatron-core GPT model on CPU and saves what it computed; a subprocess of the tests.

    python megatron_cpu_worker.py train --out FILE --runs plain|off,all,default,...
    python megatron_cpu_worker.py p2p   --out FILE --rank R --world-size 2 --port P

``megatron`` is whatever ``PYTHONPATH`` puts first: the pristine release or the instrumented fork.
Each run builds the model afresh from the same seed, feeds the same microbatches through
``schedules.forward_backward_no_pipelining`` (which calls ``forward_step`` and ``backward_step``),
and records the losses, every parameter's gradient and, for the instrumented fork, the spans that
an in-memory OpenTelemetry exporter received. Results go to ``--out`` with ``torch.save``.

Run names: ``plain`` never touches telemetry (the only run the pristine release can do); ``off``
leaves the fork's telemetry as imported (every group off); any other name is a span-group spec
passed to ``megatron.core.otel.enable``, and ``disable()`` follows the run.

What a CPU build of torch needs (nothing in megatron is patched; each is noted where it is done):

- ``forward_backward_no_pipelining`` allocates its token counter with
  ``torch.zeros([], dtype=torch.int, device="cuda")`` and no config flag avoids it: the schedule
  runs under a ``TorchFunctionMode`` that sends tensor factories asking for CUDA to the CPU;
- the local spec's ``DotProductAttention`` needs ``torch.cuda.current_device()`` (score buffer)
  and the CUDA RNG tracker (dropout fork): the layer spec swaps in a subclass without them;
- ``model_parallel_cuda_manual_seed`` reads the CUDA RNG state: ``torch.manual_seed`` instead;
- ``MambaMixer`` needs the mamba_ssm kernels: the Mamba run uses a small CPU mixer.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from typing import Any

warnings.filterwarnings("ignore")

import torch
import torch.distributed as dist

SEED = 1234
NUM_LAYERS = 2
HIDDEN = 64
HEADS = 4
VOCAB = 128
SEQ = 16
MICRO_BATCH = 2
NUM_MICROBATCHES = 2


from cuda_on_cpu import CudaFactoriesOnCpu


def init_distributed(rank: int, world_size: int, port: int, pipeline_size: int) -> None:
    from megatron.core import parallel_state

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=1, pipeline_model_parallel_size=pipeline_size
    )


def seed_everything() -> None:
    # tensor_parallel.model_parallel_cuda_manual_seed cannot run on a CPU build (its RNG tracker
    # reads torch.cuda.get_rng_state()); with use_cpu_initialization the weights come from the
    # CPU generator, and with dropout 0 nothing forks the CUDA RNG tracker.
    torch.manual_seed(SEED)


def cpu_dot_product_attention():
    """The local spec's DotProductAttention without its two CUDA-only statements.

    Its forward takes the score buffer from megatron's global memory buffer (allocated with
    ``device=torch.cuda.current_device()``) and runs attention dropout under
    ``get_cuda_rng_tracker().fork()``, which reads ``torch.cuda.get_rng_state()`` even with
    dropout 0. Both are module-spec choices, so the test's layer spec swaps in this subclass: the
    same scores, softmax (``self.scale_mask_softmax``, causal) and context computation.
    """
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class CpuDotProductAttention(DotProductAttention):
        def forward(
            self,
            query,
            key,
            value,
            attention_mask,
            attn_mask_type=None,
            attention_bias=None,
            packed_seq_params=None,
        ):
            assert packed_seq_params is None and attention_bias is None
            # [sq, b, np, hn]; no grouped-query attention here (num_query_groups == heads)
            sq, b, heads, head_dim = query.shape
            sk = key.size(0)
            q = query.reshape(sq, b * heads, head_dim).transpose(0, 1)
            k = key.reshape(sk, b * heads, head_dim).transpose(0, 1)
            scores = torch.bmm(q, k.transpose(1, 2)) * self.softmax_scale
            probs = self.scale_mask_softmax(
                scores.view(b, heads, sq, sk), attention_mask, self.softmax_offset
            )
            probs = self.attention_dropout(probs)
            v = value.reshape(sk, b * heads, head_dim).transpose(0, 1)
            context = torch.bmm(probs.view(b * heads, sq, sk), v).view(b, heads, sq, head_dim)
            context = context.permute(2, 0, 1, 3).contiguous()
            return context.view(sq, b, self.hidden_size_per_partition)

    return CpuDotProductAttention


def layer_spec():
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = get_gpt_layer_local_spec()
    spec.submodules.self_attention.submodules.core_attention = cpu_dot_product_attention()
    return spec


def transformer_config(pipeline_size: int = 1):
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=NUM_LAYERS,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        pipeline_model_parallel_size=pipeline_size,
        pipeline_dtype=torch.float32,
    )


def build_model(pre_process: bool = True, post_process: bool = True, pipeline_size: int = 1):
    from megatron.core.models.gpt import GPTModel

    seed_everything()
    return GPTModel(
        config=transformer_config(pipeline_size),
        transformer_layer_spec=layer_spec(),
        vocab_size=VOCAB,
        max_sequence_length=SEQ,
        pre_process=pre_process,
        post_process=post_process,
    )


def make_batches(count: int = NUM_MICROBATCHES, seed: int = SEED + 1) -> list[dict[str, torch.Tensor]]:
    """``count`` microbatches of random tokens (the same for the same ``seed``)."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        tokens = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ + 1), generator=generator)
        batches.append(
            {
                "tokens": tokens[:, :-1].contiguous(),
                "labels": tokens[:, 1:].contiguous(),
                "position_ids": torch.arange(SEQ).unsqueeze(0).expand(MICRO_BATCH, SEQ).contiguous(),
                "loss_mask": torch.ones(MICRO_BATCH, SEQ),
            }
        )
    return batches


def forward_step_func(data_iterator, model):
    batch = next(data_iterator)

    def loss_func(output_tensor):
        losses = output_tensor.float()
        loss_mask = batch["loss_mask"]
        loss = torch.sum(losses.view(-1) * loss_mask.view(-1))
        num_tokens = loss_mask.sum().to(torch.int)
        return loss, num_tokens, {"lm loss": torch.stack([loss.detach(), num_tokens.float()])}

    output = model(batch["tokens"], batch["position_ids"], attention_mask=None, labels=batch["labels"])
    return output, loss_func


# --------------------------------------------------------------------------------------------
# telemetry


def make_provider():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@contextlib.contextmanager
def telemetry(spec: str, provider, enabled: list[str]):
    """``spec``'s groups enabled on ``provider`` for the block, added to ``enabled``; ``plain``
    and ``off`` leave telemetry as imported."""
    if spec in ("plain", "off"):
        yield
        return
    from megatron.core import otel

    enabled.extend(sorted(otel.enable(spec, tracer_provider=provider)))
    try:
        yield
    finally:
        otel.disable()


def recorded(run, spec: str) -> dict[str, Any]:
    """``run(spec, provider)``'s result on a fresh in-memory provider, with the spans it recorded."""
    provider, exporter = make_provider()
    result = run(spec, provider)
    provider.force_flush()
    result["spans"] = spans_as_dicts(exporter)
    return result


def spans_as_dicts(exporter) -> list[dict[str, Any]]:
    out = []
    for span in exporter.get_finished_spans():
        out.append(
            {
                "name": span.name,
                "span_id": span.context.span_id,
                "trace_id": span.context.trace_id,
                "parent_id": span.parent.span_id if span.parent is not None else None,
                "attributes": dict(span.attributes or {}),
                "status": span.status.status_code.name,
                "events": [event.name for event in span.events],
            }
        )
    return out


# --------------------------------------------------------------------------------------------
# single process: forward + backward through forward_backward_no_pipelining


def train_once(otel_spec: str, provider) -> dict[str, Any]:
    from megatron.core.pipeline_parallel import schedules

    model = build_model()
    model.zero_grad(set_to_none=True)
    batches = make_batches()
    enabled: list[str] = []
    with telemetry(otel_spec, provider, enabled), CudaFactoriesOnCpu():
        reduced = schedules.forward_backward_no_pipelining(
            forward_step_func=forward_step_func,
            data_iterator=iter(batches),
            model=model,
            num_microbatches=NUM_MICROBATCHES,
            seq_length=SEQ,
            micro_batch_size=MICRO_BATCH,
        )
    return {
        "enabled_groups": enabled,
        "losses": [item["lm loss"].clone() for item in reduced],
        "grads": {
            name: (param.grad.clone() if param.grad is not None else None)
            for name, param in model.named_parameters()
        },
    }


def cpu_mixer():
    """A stand-in for MambaMixer, which needs the mamba_ssm package's CUDA/Triton kernels."""
    from megatron.core.transformer.module import MegatronModule

    class CpuMixer(MegatronModule):
        def __init__(self, config, d_model, layer_number=None, pg_collection=None, **_):
            super().__init__(config)
            self.proj = torch.nn.Linear(d_model, d_model)

        def forward(self, hidden_states, inference_context=None, packed_seq_params=None):
            return torch.tanh(self.proj(hidden_states)), None

    return CpuMixer


def mamba_once(otel_spec: str, provider) -> dict[str, Any]:
    """MambaLayer.forward + backward with a CPU mixer (megatron.layer.forward / layer.mamba)."""
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.ssm.mamba_layer import MambaLayer, MambaLayerSubmodules
    from megatron.core.transformer.spec_utils import ModuleSpec

    seed_everything()
    layer = MambaLayer(
        transformer_config(),
        MambaLayerSubmodules(mixer=ModuleSpec(module=cpu_mixer()), mamba_bda=get_bias_dropout_add),
        layer_number=3,
        pg_collection=ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp"]),
    )
    hidden = torch.randn(SEQ, MICRO_BATCH, HIDDEN, generator=torch.Generator().manual_seed(SEED + 2))
    enabled: list[str] = []
    with telemetry(otel_spec, provider, enabled):
        output = layer(hidden)
        output.square().sum().backward()
    return {
        "enabled_groups": enabled,
        "output": output.detach().clone(),
        "grads": {name: param.grad.clone() for name, param in layer.named_parameters()},
    }


def main_train(args) -> None:
    from megatron.core import parallel_state

    init_distributed(0, 1, args.port, 1)
    results: dict[str, Any] = {"runs": {}, "mamba": {}}
    try:
        for spec in args.runs.split(","):
            for what, run in (("runs", train_once), ("mamba", mamba_once)):
                results[what][spec] = recorded(run, spec)
        results["megatron_file"] = sys.modules["megatron.core"].__file__
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    torch.save(results, args.out)


# --------------------------------------------------------------------------------------------
# two processes: P2PCommunicator between pipeline stages 0 and 1


def main_p2p(args) -> None:
    """Rank 0 = first stage, rank 1 = last stage, pipeline parallel 2, world size 2.

    ``send_forward`` (rank 0 -> 1) and ``send_backward`` (rank 1 -> 0) really communicate through
    megatron's ``_p2p_ops`` (isend on gloo). Their receiving ends are plain
    ``torch.distributed.recv``: megatron's receive allocates its buffer with
    ``device=torch.cuda.current_device()``, which a CPU build cannot run (rank 1 records that
    failure through the instrumented ``recv_forward``). ``recv_forward`` on the first stage and
    ``recv_backward`` on the last stage return without communicating; their spans still record.
    """
    from megatron.core import otel, parallel_state
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator

    init_distributed(args.rank, args.world_size, args.port, args.world_size)
    provider, exporter = make_provider()
    results: dict[str, Any] = {"rank": args.rank, "cuda_available": torch.cuda.is_available()}
    try:
        pp_group = parallel_state.get_pipeline_model_parallel_group()
        config = ModelParallelConfig(
            pipeline_model_parallel_size=args.world_size,
            pipeline_dtype=torch.float32,
            batch_p2p_comm=False,  # the batched path ends in torch.cuda.synchronize()
        )
        comm = P2PCommunicator(pp_group, config)
        shape = (SEQ, MICRO_BATCH, HIDDEN)
        activation = torch.arange(SEQ * MICRO_BATCH * HIDDEN, dtype=torch.float32).view(shape)
        gradient = -activation / 7
        otel.enable("communication", tracer_provider=provider)
        try:
            if args.rank == 0:
                results["recv_forward"] = comm.recv_forward(shape, is_first_stage=True)
                comm.send_forward(activation, is_last_stage=False)
                received = torch.empty(shape)
                # _p2p_ops: with a pipeline group of 2, odd ranks send backward on WORLD
                dist.recv(received, src=1, group=dist.group.WORLD)
                results["received"] = received
            else:
                if not torch.cuda.is_available():
                    try:
                        comm.recv_forward(shape, is_first_stage=False)
                    except Exception as error:  # noqa: BLE001 - recorded for the test
                        results["recv_forward_error"] = f"{type(error).__name__}: {error}"
                received = torch.empty(shape)
                dist.recv(received, src=0, group=pp_group)
                results["received"] = received
                comm.send_backward(gradient, is_first_stage=False)
                results["recv_backward"] = comm.recv_backward(shape, is_last_stage=True)
            results["sent"] = activation if args.rank == 0 else gradient
        finally:
            otel.disable()
        dist.barrier()
        provider.force_flush()
        results["spans"] = spans_as_dicts(exporter)
        results["megatron_file"] = sys.modules["megatron.core"].__file__
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    torch.save(results, args.out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train")
    train.add_argument("--out", required=True)
    train.add_argument("--runs", required=True)
    train.add_argument("--port", type=int, required=True)
    p2p = sub.add_parser("p2p")
    p2p.add_argument("--out", required=True)
    p2p.add_argument("--rank", type=int, required=True)
    p2p.add_argument("--world-size", type=int, default=2)
    p2p.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.command == "train":
        main_train(args)
    else:
        main_p2p(args)


if __name__ == "__main__":
    main()
