from megatron import helpers


class Model(helpers.Base):
    layer_number = 3

    @helpers.decorate()
    def forward(self, x):
        # Comment before the first statement.
        out = super().forward(x)
        return out  # trailing comment
