import megatron.otel as _otel


class Builder:
    def build(self, kind, fused):
        _otel_span = _otel.STEP and _otel.start_span("demo.build")
        try:
            if kind == 1:
                op = abs
            elif kind == 2:
                if fused:
                    op = round
                elif kind > 1:
                    for _ in range(1):
                        try:
                            op = None
                        except ValueError:
                            op = None
                        else:
                            if fused is None:
                                op = int
                            elif fused is False:

                                def deep(v):
                                    _otel_span = _otel.STEP and _otel.start_span("demo.build.deep")
                                    try:
                                        return v + 1
                                    finally:
                                        _otel_span and _otel_span.end()

                                op = deep
            else:
                op = float
            return op
        finally:
            _otel_span and _otel_span.end()


if __debug__:
    pass
elif True:

    def module_level():
        _otel_span = _otel.STEP and _otel.start_span("demo.module_level")
        try:
            return 1
        finally:
            _otel_span and _otel_span.end()
