import math

import megatron.otel as _otel


def work(x, *, scale=2):
    """Scale x.

    Several lines of docstring.
    """
    _otel_span = _otel.STEP and _otel.start_span("demo.work")
    try:
        y = x * scale
        return math.floor(y)
    finally:
        _otel_span and _otel_span.end()


def untouched():
    return 1
