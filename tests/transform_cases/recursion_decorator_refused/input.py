def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)


class Tree:
    def __init__(self, children=()):
        self.children = list(children)

    def size(self):
        return 1 + sum(child.size() for child in self.children)

    def height(self, node=None):
        node = node or self
        return 1 + max((self.height(c) for c in node.children), default=0)
