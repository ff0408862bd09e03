class Layer:
    def forward(self, hidden_states, **kwargs):
        """Forward."""
        hidden_states, context = self._forward_attention(hidden_states)

        # Feed-forward.
        output = self._forward_mlp(
            hidden_states,
            kwargs.get("inference_context", None),
            padding_mask=kwargs.get("padding_mask", None),
        )
        return output, context
