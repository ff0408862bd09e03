import megatron.otel as _otel
from megatron.core.num_microbatches_calculator import get_num_microbatches


def train_step(config, optimizer):
    """One step."""
    _otel_span = _otel.STEP and _otel.start_span(
        "demo.train_step",
        lambda: {
            "demo.num_microbatches_for_a_rather_long_attribute_key": get_num_microbatches(config),
        },
    )
    try:
        losses = config.forward_backward()
        _otel_span_2 = _otel.STEP and _otel.start_span("demo.train_step.optimizer")
        try:
            update_successful, grad_norm = optimizer.step()
            _otel_span_2 and _otel_span_2.set_attributes(
                lambda: {"demo.update_successful": update_successful}
            )
        finally:
            _otel_span_2 and _otel_span_2.end()
        if not update_successful:
            return None
        return losses, grad_norm
    finally:
        _otel_span and _otel_span.end()
