import megatron.otel as _otel


class Layer:
    def forward(self, hidden_states, **kwargs):
        """Forward."""
        hidden_states, context = self._forward_attention(hidden_states)

        # Feed-forward.
        _otel_span = _otel.LAYER and _otel.start_span("demo.mlp")
        try:
            output = self._forward_mlp(
                hidden_states,
                kwargs.get("inference_context", None),
                padding_mask=kwargs.get("padding_mask", None),
            )
        finally:
            _otel_span and _otel_span.end()
        return output, context
