class Layer:
    def forward(self, hidden_states, inference_context=None, packed_seq_params=None):
        if self.enabled:
            out = self.mixer(
                hidden_states, inference_context=inference_context, packed_seq=packed_seq_params_ab
            )
            return out
        return None
