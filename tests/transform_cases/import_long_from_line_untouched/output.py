import megatron.otel as _otel
from megatron import aaaaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbbbbb, cccccccccccccccccccccccccccc, ddddd


def f():
    _otel_span = _otel.STEP and _otel.start_span("demo.f")
    try:
        return 1
    finally:
        _otel_span and _otel_span.end()
