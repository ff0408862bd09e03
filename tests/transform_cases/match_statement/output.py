from megatron import otel


def dispatch(kind, handle_a):
    _otel_span = otel.STEP and otel.start_span("demo.dispatch")
    try:
        match kind:
            case "a":
                _otel_span_2 = otel.STEP and otel.start_span("demo.dispatch.a")
                try:
                    handle_a()
                finally:
                    _otel_span_2 and _otel_span_2.end()
                return 1
            case _:
                return 2
    finally:
        _otel_span and _otel_span.end()
