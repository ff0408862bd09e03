def setup(args, load_checkpoint):
    inference_context = args.context
    ckpt_pgc = getattr(args, "pgc", None)
    iteration, flops = load_checkpoint(args, pgc=ckpt_pgc)
    print(iteration)
    return iteration, flops


def train(args, step):
    iteration = 0
    while iteration < args.train_iters:
        if args.skip_train:
            iteration += 1
        else:
            loss = step(iteration)
            iteration += 1
            print(loss)
    return iteration
