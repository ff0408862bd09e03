import gc

import megatron.otel as _otel


def save(args, model, report_memory):
    report_memory("before")
    gc.collect()
    _otel_span = _otel.IO and _otel.start_span("demo.reclaim")
    try:
        for model_chunk in model:
            model_chunk.reclaim()
    finally:
        _otel_span and _otel_span.end()
    _otel_span = _otel.LAYER and _otel.start_span("demo.cuda_graph")
    try:
        if args.cuda_graph_impl == "transformer_engine" and args.capture_finished():
            args.capture()
    finally:
        _otel_span and _otel_span.end()
    if args.fp8:
        _otel_span = _otel.STEP and _otel.start_span("demo.gc")
        try:
            gc.collect()
        finally:
            _otel_span and _otel_span.end()
    _otel_span = _otel.STEP and _otel.start_span("demo.report_memory")
    try:
        report_memory("after")
    finally:
        _otel_span and _otel_span.end()
