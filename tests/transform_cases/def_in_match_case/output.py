import megatron.otel as _otel


def dispatch(command):
    match command:
        case "a":

            def run_a():
                _otel_span = _otel.STEP and _otel.start_span("demo.dispatch.a")
                try:
                    return 1
                finally:
                    _otel_span and _otel_span.end()

            return run_a()
        case {"kind": kind} if kind:

            def run_kind():
                _otel_span = _otel.STEP and _otel.start_span("demo.dispatch.kind")
                try:
                    return kind
                finally:
                    _otel_span and _otel_span.end()

            return run_kind()
        case _:

            def run_other():
                _otel_span = _otel.STEP and _otel.start_span("demo.dispatch.other")
                try:
                    return 2
                finally:
                    _otel_span and _otel_span.end()

            return run_other()
