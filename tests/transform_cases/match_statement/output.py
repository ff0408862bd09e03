import megatron.otel as _otel


def dispatch(kind, handle_a):
    _otel_span = _otel.STEP and _otel.start_span("demo.dispatch")
    try:
        match kind:
            case "a":
                _otel_span_2 = _otel.STEP and _otel.start_span("demo.dispatch.a")
                try:
                    handle_a()
                finally:
                    _otel_span_2 and _otel_span_2.end()
                return 1
            case _:
                return 2
    finally:
        _otel_span and _otel_span.end()
