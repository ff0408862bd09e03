import megatron.otel as _otel


def load_checkpoint(model):
    return 1


def setup(args, model):
    """Build and load."""
    helper(args)
    _otel_span = _otel.IO and _otel.start_span("demo.load")
    try:
        iteration = load_checkpoint(model)
    finally:
        _otel_span and _otel_span.end()
    helper(model)
    sniff(args)
    done = True
    _otel.reset()
    _otel_span = _otel.STEP and _otel.start_span("demo.old_only")
    try:
        finish(iteration)
    finally:
        _otel_span and _otel_span.end()
    return iteration
