import megatron.otel as _otel


class Model:
    def __init__(self, layer_number):
        self.layer_number = layer_number

    def forward(self, x):
        """Forward."""
        _otel_span = _otel.LAYER and _otel.start_span(
            "megatron.a.span.name.long.enough.that.the.generated.start.call.needs.more.than.one.hu"
            "ndred.columns.in.total",
            lambda: {"megatron.layer_number": self.layer_number},
        )
        try:
            _otel_span_2 = _otel.LAYER and _otel.start_span(
                "megatron.another.span.name.long.enough.that.it.is.split.into.several.string.liter"
                "als.by.the.generator.itself.when.laid.out",
            )
            try:
                y = self.mlp(x)
            finally:
                _otel_span_2 and _otel_span_2.end()
            return y
        finally:
            _otel_span and _otel_span.end()
