import os

from megatron import otel

if os.environ.get("FAST"):

    @otel.traced("demo.fast")
    def fast(x):
        return x * 2

from megatron.utils import helper


def run(x):
    return helper(x)
