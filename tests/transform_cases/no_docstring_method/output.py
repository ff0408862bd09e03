import megatron.otel as _otel
from megatron import helpers


class Model(helpers.Base):
    layer_number = 3

    @helpers.decorate()
    def forward(self, x):
        # Comment before the first statement.
        _otel_span = _otel.LAYER and _otel.start_span(
            "demo.method", lambda: {"demo.layer_number": self.layer_number, "demo.kind": 'dense'}
        )
        try:
            out = super().forward(x)
            return out  # trailing comment
        finally:
            _otel_span and _otel_span.end()
