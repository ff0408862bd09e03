import os

if os.environ.get("FAST"):

    def fast(x):
        return x * 2

from megatron.utils import helper


def run(x):
    return helper(x)
