import megatron.otel as _otel


class Engine:
    def __init__(self, otel_handle):
        _otel_span = _otel.STEP and _otel.start_span("demo.init")
        try:
            self._otel = otel_handle
        finally:
            _otel_span and _otel_span.end()

    def step(self, x):
        _otel_span = _otel.STEP and _otel.start_span("demo.step")
        try:
            self._otel.count += 1
            return x + self._otel.count
        finally:
            _otel_span and _otel_span.end()
