from megatron import otel


def fill(buf, obj, values, v):
    _otel_span = otel.LAYER and otel.start_span("demo.index")
    try:
        i = len(values)
    finally:
        _otel_span and _otel_span.end()
    buf[i] = v
    obj.i = v
    buf[obj.rest] = v
    _otel_span = otel.LAYER and otel.start_span("demo.unpack")
    try:
        head, *rest = values
    finally:
        _otel_span and _otel_span.end()
    return head, rest
