"""Module docstring."""

import os

from megatron import helpers, zeta
from megatron.sub import thing


def run():
    return helpers.go(os.getcwd(), thing, zeta)
