import megatron.otel as _otel


def train(args, step):
    if args.skip_train:
        return None
    else:
        _otel_span = _otel.STEP and _otel.start_span("demo.iteration")
        try:
            _otel_span_2 = (
                _otel.LAYER
                and _otel.first_time("demo.first_iteration")
                and _otel.start_span("demo.first_iteration")
            )
            try:
                loss = step()
                return loss
            finally:
                _otel_span_2 and _otel_span_2.end()
        finally:
            _otel_span and _otel_span.end()


def sniff(tag):
    _otel_span = _otel.STEP and _otel.start_span(
        "demo.train.sniff" if _otel.in_training() else "demo.startup.sniff"
    )
    try:
        print(tag)
    finally:
        _otel_span and _otel_span.end()
