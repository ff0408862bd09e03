from megatron import (
    alpha,  # needed for side effects
    beta,  # keep: used by plugins
)
from megatron import zeta  # a second statement stays as it is


def f():
    return alpha, beta, zeta
