from megatron import otel


def log(loss_fn, warmup):
    """Log the loss."""
    loss = loss_fn()
    otel.IO and otel.set_current_attributes(
        lambda: {"demo.phase": 'warm  up' if warmup else 'steady   state'}
    )
    return loss
