class Model:
    def __init__(self, layer_number):
        self.layer_number = layer_number

    def forward(self, x):
        """Forward."""
        y = self.mlp(x)
        return y
