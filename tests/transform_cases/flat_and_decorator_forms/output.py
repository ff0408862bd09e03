import time

import megatron.otel as _otel


@some.decorator
@_otel.traced("demo.save", {"demo.iteration": "iteration"})
def save_and_time(iteration, model, verbose=False):
    """Save a checkpoint and time it."""
    start = time.time()
    # Save, then measure.
    _otel_span = _otel.IO and _otel.start_span("demo.save.write")
    save(iteration, model)
    duration = time.time() - start
    _otel_span and _otel_span.set_attributes(lambda: {"demo.duration": duration})
    _otel_span and _otel_span.end()
    if verbose:
        _otel_span = _otel.IO and _otel.start_span("demo.save.report")
        report(duration)
        _otel_span and _otel_span.end()
    return duration
