import megatron.otel as _otel


def log(loss_fn, warmup):
    """Log the loss."""
    loss = loss_fn()
    _otel.IO and _otel.set_current_attributes(
        lambda: {"demo.phase": 'warm  up' if warmup else 'steady   state'}
    )
    return loss
