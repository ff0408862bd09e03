def train(args, model):
    if args.profile: start_profiler(model)
    for step in range(args.steps):
        if step % 10 == 0: log(step)
        model.step()
    return model
