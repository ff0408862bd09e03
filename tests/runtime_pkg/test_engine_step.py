"""The dynamic engine's step (``engine_step``, issue 40 item 3): on the step's span, the step's
prefill and decode tokens, active requests and the KV-cache blocks in use, read from a context
shaped as megatron-core's ``DynamicInferenceContext`` (the engine needs CUDA to step: here the
step's span is the runtime's own decorator over a coroutine, the context a stand-in with the
fields ``tests/target/test_engine_step_source.py`` finds in the real one); the
``megatron.inference.*`` metrics recorded; nothing raised on what a context may lack."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from runtime_pkg_support import specs_runtime_in_memory

from tests.support.processors import metric_points

SPECS = Path(__file__).resolve().parents[2] / "specs"


@pytest.fixture
def engine(importable: Path, unique_top: str, exit_hooks: Any, monkeypatch: pytest.MonkeyPatch):
    """The runtime rendered from the real specs, on SDK providers (in-memory), the engine's group on."""
    engine = specs_runtime_in_memory(importable, unique_top, monkeypatch, "inference_steps")
    otel = engine.otel
    assert otel.SPANS["megatron.inference.step"].group == "inference_steps" and otel.INFERENCE_STEPS
    yield engine
    otel.reset()


def context(tokens: int, prefill: int, decode: int, speculative: int = 0, used: int = 7) -> Any:
    """A DynamicInferenceContext after a step: its batch_dimensions, num_speculative_tokens and
    kv_block_allocator.get_total_used()."""
    return SimpleNamespace(
        batch_dimensions=SimpleNamespace(
            token_count=tokens, prefill_req_count=prefill, decode_req_count=decode
        ),
        num_speculative_tokens=speculative,
        kv_block_allocator=SimpleNamespace(get_total_used=lambda: used),
    )


def step(otel: ModuleType, *contexts: Any) -> None:
    """What the instrumented engine runs: async_step under @otel.traced("megatron.inference.step"),
    its async_forward calling engine_step(self.context) once the forward has run."""

    @otel.traced("megatron.inference.step")
    async def async_step(ctx: Any) -> None:
        await asyncio.sleep(0)
        otel.INFERENCE_STEPS and otel.engine_step(ctx)

    for ctx in contexts:
        asyncio.run(async_step(ctx))


def test_a_step_carries_its_batch_and_the_kv_blocks_in_use(engine):
    # two prompts of 100 and 28 tokens being prefilled beside 3 decoding requests (2 speculative
    # tokens each: 3 tokens per decode request), then a decode-only step
    step(engine.otel, context(137, 2, 3, speculative=2, used=40), context(5, 0, 5, used=41))
    first, second = engine.spans.get_finished_spans()
    assert first.name == second.name == "megatron.inference.step"
    assert first.parent is None and second.parent is None  # the engine's loop: a root per step
    assert dict(first.attributes) == {
        "megatron.span_group": "inference_steps",
        "megatron.inference.prefill_tokens": 128,
        "megatron.inference.decode_tokens": 9,
        "megatron.inference.active_requests": 5,
        "megatron.inference.kv_cache.blocks_used": 40,
    }
    assert second.attributes["megatron.inference.prefill_tokens"] == 0
    assert second.attributes["megatron.inference.decode_tokens"] == 5
    found = metric_points(engine.reader)
    tokens = {
        p.attributes["megatron.inference.token.type"]: (p.count, p.sum)
        for p in found["megatron.inference.step.tokens"]
    }
    assert tokens == {"prefill": (1, 128), "decode": (2, 14)}  # a step without prefill records none
    (active,) = found["megatron.inference.active_requests"]
    (blocks,) = found["megatron.inference.kv_cache.blocks_used"]
    assert (active.value, blocks.value) == (5, 41)  # gauges: the last step's


def test_nothing_raises_on_what_a_context_may_lack(engine):
    broken = SimpleNamespace(kv_block_allocator=SimpleNamespace(get_total_used=lambda: 1 / 0))
    step(engine.otel, None, SimpleNamespace(), broken, context(True, 1, 0))  # type: ignore[arg-type]
    attributes = [
        {k: v for k, v in s.attributes.items() if k != "megatron.span_group"}
        for s in engine.spans.get_finished_spans()
    ]
    # a boolean is no count: the batch left out, the blocks kept
    assert attributes == [{}, {}, {}, {"megatron.inference.kv_cache.blocks_used": 7}]
    assert "megatron.inference.step.tokens" not in metric_points(engine.reader)


def test_off_the_step_records_nothing(otel):
    otel.engine_step(context(10, 1, 0))
    from opentelemetry import trace

    assert not trace.get_current_span().get_span_context().is_valid
