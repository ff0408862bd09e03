def scale(values, factor):
    times = lambda _otel: _otel * factor
    shift = lambda _otel_span=0: _otel_span + 1
    return [times(v) + shift() for v in values]
