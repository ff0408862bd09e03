class Layer:
    def forward(self, hidden_states, inference_context=None, packed_seq_params=None):
        if self.enabled:
            out = self.mixer(
                hidden_states, inference_context=inference_context, packed_seq_params=packed_seq_params
            )
            return out
        return None
