import megatron.otel as _otel
from megatron import (
    alpha,  # needed for side effects
    beta,  # keep: used by plugins
)
from megatron import zeta  # a second statement stays as it is


def f():
    _otel_span = _otel.STEP and _otel.start_span("demo.f")
    try:
        return alpha, beta, zeta
    finally:
        _otel_span and _otel_span.end()
