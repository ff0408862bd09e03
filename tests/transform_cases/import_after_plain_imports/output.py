import os

import megatron.core.x
import megatron.otel as _otel


def f():
    _otel_span = _otel.STEP and _otel.start_span("demo.f")
    try:
        return os, megatron
    finally:
        _otel_span and _otel_span.end()
