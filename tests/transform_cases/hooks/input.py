import time

TIMESTAMPS = {}


def pretrain(args):
    timestamp_after_setup = time.time()
    return train(args, 0)


def train(args, start):
    iteration = start
    while iteration < args.train_iters:
        if iteration % 10 == 0:
            print(iteration)
        iteration += 1
    return iteration


def destroy():
    """Tear down global state."""
    TIMESTAMPS.clear()


def log(loss_sum, count, lr):
    loss = loss_sum / count
    return loss


def finalize(queue):
    call_idx = queue.finalize()
    return call_idx
