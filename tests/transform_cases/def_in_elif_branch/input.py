"""Functions defined in an ``elif`` branch (megatron-core's ``MLP.forward.glu``, argparse's
``HelpFormatter._format_usage.get_lines``)."""


class MLP:
    def forward(self, x):
        """Forward."""
        if self.fused:
            y = x
        elif self.gated:

            def glu(v):
                return v * 2

            y = glu(x)
        else:
            y = -x
        return y


class HelpFormatter:
    def _format_usage(self, usage):
        if usage is not None:
            usage = usage + "!"
        elif not self.actions:
            usage = "%(prog)s"
        elif usage is None:

            def get_lines(parts, indent):
                lines = []
                for part in parts:
                    lines.append(indent + part)
                return lines

            usage = " ".join(get_lines(["a", "b"], ""))
        return usage
