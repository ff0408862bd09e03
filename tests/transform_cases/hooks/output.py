import time

import megatron.otel as _otel

TIMESTAMPS = {}


def pretrain(args):
    timestamp_after_setup = time.time()
    _otel.startup(
        {
            'program_start': TIMESTAMPS.get('program_start'),
            'pretrain_entry': TIMESTAMPS.get('pretrain_entry'),
            'setup': timestamp_after_setup,
        }
    )
    return train(args, 0)


def train(args, start):
    _otel.begin_training(start, args.save_interval)
    try:
        iteration = start
        while iteration < args.train_iters:
            _otel.train_iteration(iteration)
            if iteration % 10 == 0:
                print(iteration)
            iteration += 1
        return iteration
    finally:
        _otel.end_training()


def destroy():
    """Tear down global state."""
    _otel.reset()
    TIMESTAMPS.clear()


def log(loss_sum, count, lr):
    loss = loss_sum / count
    _otel.METRICS and _otel.record_metrics(
        lambda: {"demo.loss": loss, "demo.learning_rate": lr if lr > 0 else None}
    )
    return loss


def finalize(queue):
    call_idx = queue.finalize()
    _otel.IO and _otel.set_current_attributes(lambda: {"nvrx.call_idx": call_idx})
    return call_idx
