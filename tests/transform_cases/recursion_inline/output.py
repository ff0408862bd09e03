import megatron.otel as _otel


def depth(n):
    _otel_span = _otel.STEP and _otel.start_span("demo.depth")
    try:
        return 0 if n == 0 else 1 + depth(n - 1)
    finally:
        _otel_span and _otel_span.end()


class Tree:
    def __init__(self, children=()):
        self.children = list(children)

    def size(self):
        return 1 + sum(child.size() for child in self.children)

    def height(self, node=None):
        _otel_span = _otel.STEP and _otel.start_span("demo.tree.height")
        try:
            node = node or self
            return 1 + max((self.height(c) for c in node.children), default=0)
        finally:
            _otel_span and _otel_span.end()
