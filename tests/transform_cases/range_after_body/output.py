import megatron.otel as _otel


def setup(args, load_checkpoint):
    inference_context = args.context
    _otel_span = _otel.STEP and _otel.start_span("demo.after_init")
    try:
        _otel_span_2 = _otel.IO and _otel.start_span("demo.load")
        try:
            ckpt_pgc = getattr(args, "pgc", None)
            iteration, flops = load_checkpoint(args, pgc=ckpt_pgc)
        finally:
            _otel_span_2 and _otel_span_2.end()
        print(iteration)
        return iteration, flops
    finally:
        _otel_span and _otel_span.end()


def train(args, step):
    iteration = 0
    while iteration < args.train_iters:
        if args.skip_train:
            _otel_span = _otel.LAYER and _otel.start_span("demo.first")
            try:
                iteration += 1
            finally:
                _otel_span and _otel_span.end()
        else:
            _otel_span = _otel.STEP and _otel.start_span("demo.iteration")
            try:
                loss = step(iteration)
                iteration += 1
                print(loss)
            finally:
                _otel_span and _otel_span.end()
    return iteration
