import megatron.otel as _otel


def scale(values, factor):
    _otel_span = _otel.STEP and _otel.start_span("demo.scale")
    try:
        times = lambda _otel: _otel * factor
        shift = lambda _otel_span=0: _otel_span + 1
        return [times(v) + shift() for v in values]
    finally:
        _otel_span and _otel_span.end()
