from megatron.core.num_microbatches_calculator import get_num_microbatches


def train_step(config, optimizer):
    """One step."""
    losses = config.forward_backward()
    update_successful, grad_norm = optimizer.step()
    if not update_successful:
        return None
    return losses, grad_norm
