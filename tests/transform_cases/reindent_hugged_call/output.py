import megatron.otel as _otel


class Layer:
    def forward(self, hidden_states, inference_context=None, packed_seq_params=None):
        if self.enabled:
            _otel_span = _otel.LAYER and _otel.start_span("demo.mixer")
            try:
                out = self.mixer(
                    hidden_states,
                    inference_context=inference_context,
                    packed_seq=packed_seq_params_ab,
                )
            finally:
                _otel_span and _otel_span.end()
            return out
        return None
