import megatron.otel as _otel


def scan(items):
    for item in items:
        if item:
            break
    else:

        def fallback():
            _otel_span = _otel.STEP and _otel.start_span("demo.scan.fallback")
            try:
                return 0
            finally:
                _otel_span and _otel_span.end()

        return fallback()
    while len(items) > 1:
        items = items[1:]
    else:

        def drained():
            _otel_span = _otel.STEP and _otel.start_span("demo.scan.drained")
            try:
                return 1
            finally:
                _otel_span and _otel_span.end()

        drained()
    try:
        value = items[0]
    except IndexError:

        def missing():
            _otel_span = _otel.STEP and _otel.start_span("demo.scan.missing")
            try:
                return None
            finally:
                _otel_span and _otel_span.end()

        value = missing()
    else:

        def present():
            _otel_span = _otel.STEP and _otel.start_span("demo.scan.present")
            try:
                return value
            finally:
                _otel_span and _otel_span.end()

        value = present()
    finally:

        def cleanup():
            _otel_span = _otel.STEP and _otel.start_span("demo.scan.cleanup")
            try:
                return 2
            finally:
                _otel_span and _otel_span.end()

        cleanup()
    return value
