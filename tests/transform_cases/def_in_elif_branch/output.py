"""Functions defined in an ``elif`` branch (megatron-core's ``MLP.forward.glu``, argparse's
``HelpFormatter._format_usage.get_lines``)."""

import megatron.otel as _otel


class MLP:
    def forward(self, x):
        """Forward."""
        _otel_span = _otel.STEP and _otel.start_span("demo.mlp.forward")
        try:
            if self.fused:
                y = x
            elif self.gated:

                def glu(v):
                    _otel_span = _otel.STEP and _otel.start_span("demo.mlp.glu")
                    try:
                        return v * 2
                    finally:
                        _otel_span and _otel_span.end()

                y = glu(x)
            else:
                y = -x
            return y
        finally:
            _otel_span and _otel_span.end()


class HelpFormatter:
    def _format_usage(self, usage):
        if usage is not None:
            usage = usage + "!"
        elif not self.actions:
            usage = "%(prog)s"
        elif usage is None:

            def get_lines(parts, indent):
                _otel_span = _otel.STEP and _otel.start_span("demo.usage.get_lines")
                try:
                    lines = []
                    for part in parts:
                        lines.append(indent + part)
                    return lines
                finally:
                    _otel_span and _otel_span.end()

            usage = " ".join(get_lines(["a", "b"], ""))
        return usage
