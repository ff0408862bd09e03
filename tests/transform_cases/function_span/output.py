import math

from megatron import otel


def work(x, *, scale=2):
    """Scale x.

    Several lines of docstring.
    """
    _otel_span = otel.STEP and otel.start_span("demo.work")
    try:
        y = x * scale
        return math.floor(y)
    finally:
        _otel_span and _otel_span.end()


def untouched():
    return 1
