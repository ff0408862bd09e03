import megatron.otel as _otel


def fill(buf, obj, values, v):
    _otel_span = _otel.LAYER and _otel.start_span("demo.index")
    try:
        i = len(values)
    finally:
        _otel_span and _otel_span.end()
    buf[i] = v
    obj.i = v
    buf[obj.rest] = v
    _otel_span = _otel.LAYER and _otel.start_span("demo.unpack")
    try:
        head, *rest = values
    finally:
        _otel_span and _otel_span.end()
    return head, rest
