def load_checkpoint(model):
    return 1


def setup(args, model):
    """Build and load."""
    helper(args)
    iteration = load_checkpoint(model)
    helper(model)
    sniff(args)
    done = True
    finish(iteration)
    return iteration
