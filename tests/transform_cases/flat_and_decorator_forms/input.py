import time


@some.decorator
def save_and_time(iteration, model, verbose=False):
    """Save a checkpoint and time it."""
    start = time.time()
    # Save, then measure.
    save(iteration, model)
    duration = time.time() - start
    if verbose:
        report(duration)
    return duration
