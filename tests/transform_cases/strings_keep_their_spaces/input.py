def log(loss_fn, warmup):
    """Log the loss."""
    loss = loss_fn()
    return loss
