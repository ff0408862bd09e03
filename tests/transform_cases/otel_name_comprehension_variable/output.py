import megatron.otel as _otel


def total(rows):
    _otel_span = _otel.STEP and _otel.start_span("demo.total")
    try:
        squares = [_otel * _otel for _otel in rows]
        pairs = {_otel: _otel_span for _otel, _otel_span in enumerate(rows)}
        return sum(squares) + sum(pairs) + sum(_otel for _otel in rows)
    finally:
        _otel_span and _otel_span.end()
