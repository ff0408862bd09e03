class Builder:
    def build(self, kind, fused):
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
                                return v + 1

                            op = deep
        else:
            op = float
        return op


if __debug__:
    pass
elif True:

    def module_level():
        return 1
