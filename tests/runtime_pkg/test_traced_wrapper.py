"""``traced``'s wrapper: for a function whose parameters are all positional-or-keyword it has the
function's own parameters (a disabled span then packs no argument tuple or dictionary); any other
function gets the generic ``*args, **kwargs`` wrapper. Both behave as the function does, disabled
and enabled."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from tests.support.processors import in_memory

SPAN = "megatron.checkpoint.save"


def functions(otel: ModuleType) -> dict[str, object]:
    traced = otel.traced

    @traced(SPAN, {"megatron.iteration": "iteration"})
    def exact(iteration, scale=2, items=None):
        """Doc."""
        return iteration * scale, items

    @traced(SPAN, {"megatron.iteration": "iteration"})
    def generic(iteration, *rest, scale=2):
        return iteration * scale, rest

    @traced(SPAN)
    def reserved(_otel_fn):
        return _otel_fn

    class Holder:
        @traced(SPAN, {"megatron.iteration": "iteration"})
        def method(self, iteration):
            return iteration + 1

    return {"exact": exact, "generic": generic, "reserved": reserved, "method": Holder().method}


def test_the_exact_wrapper_is_the_function_to_its_callers(otel: ModuleType) -> None:
    f = functions(otel)
    exact = f["exact"]
    assert exact.__code__.co_varnames[:3] == ("iteration", "scale", "items")  # its own parameters
    assert "args" not in f["generic"].__code__.co_varnames or f["generic"].__code__.co_flags & 0x04
    assert f["reserved"].__code__.co_flags & 0x04  # *args: the generic wrapper
    assert exact.__name__ == "exact" and exact.__doc__ == "Doc."
    assert str(inspect.signature(exact)) == "(iteration, scale=2, items=None)"
    assert exact(3) == (6, None) and exact(3, 3) == (9, None) and exact(iteration=2, items=[1]) == (4, [1])
    assert f["method"](4) == 5 and f["generic"](2, 7, scale=3) == (6, (7,)) and f["reserved"](5) == 5
    with pytest.raises(TypeError, match=r"exact\(\) missing 1 required positional argument: 'iteration'"):
        exact()
    with pytest.raises(TypeError, match=r"exact\(\) got an unexpected keyword argument 'nope'"):
        exact(1, nope=2)


@pytest.mark.parametrize("which", ["exact", "generic", "method"])
def test_enabled_both_wrappers_record_the_span_with_its_argument(otel: ModuleType, which: str) -> None:
    provider, exporter = in_memory(shutdown_on_exit=False)
    f = functions(otel)[which]
    assert otel.enable("checkpoint", tracer_provider=provider) == {"checkpoint"}
    f(5)
    f(iteration=6)
    otel.disable()
    f(7)  # disabled again: no span
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [SPAN, SPAN]
    assert [s.attributes.get("megatron.iteration") for s in spans] == [5, 6]
    provider.shutdown()
