from megatron import (
    aaaaaaaaaaaaaaaaaaaaaa,
    bbbbbbbbbbbbbbbbbbbbbbbbbb,
    cccccccccccccccccccccccccccc,
    ddddd,
    otel,
)


def f():
    _otel_span = otel.STEP and otel.start_span("demo.f")
    try:
        return 1
    finally:
        _otel_span and _otel_span.end()
