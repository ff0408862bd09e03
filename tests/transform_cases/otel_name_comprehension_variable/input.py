def total(rows):
    squares = [_otel * _otel for _otel in rows]
    pairs = {_otel: _otel_span for _otel, _otel_span in enumerate(rows)}
    return sum(squares) + sum(pairs) + sum(_otel for _otel in rows)
