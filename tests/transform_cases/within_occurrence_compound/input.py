import gc


def save(args, model, report_memory):
    report_memory("before")
    gc.collect()
    for model_chunk in model:
        model_chunk.reclaim()
    if args.cuda_graph_impl == "transformer_engine" and args.capture_finished():
        args.capture()
    if args.fp8:
        gc.collect()
    report_memory("after")
