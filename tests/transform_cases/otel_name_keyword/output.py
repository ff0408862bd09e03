import megatron.otel as _otel


def configure(**options):
    return dict(options)


def setup(flag):
    _otel_span = _otel.STEP and _otel.start_span("demo.setup")
    try:
        settings = configure(_otel=flag, _otel_span=None)
        return settings
    finally:
        _otel_span and _otel_span.end()
