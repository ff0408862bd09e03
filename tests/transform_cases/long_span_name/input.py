class Model:
    def forward(self, x):
        """Forward."""
        y = self.mlp(x)
        return y
