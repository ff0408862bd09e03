def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)


class Tree:
    def height(self, node):
        return 1 + max(self.height(c) for c in node.children)
