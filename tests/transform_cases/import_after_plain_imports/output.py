import os

import megatron.core.x
from megatron import otel


def f():
    _otel_span = otel.STEP and otel.start_span("demo.f")
    try:
        return os, megatron
    finally:
        _otel_span and _otel_span.end()
