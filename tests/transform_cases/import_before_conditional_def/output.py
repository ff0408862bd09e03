import os

import megatron.otel as _otel

if os.environ.get("FAST"):

    @_otel.traced("demo.fast")
    def fast(x):
        return x * 2

from megatron.utils import helper


def run(x):
    return helper(x)
