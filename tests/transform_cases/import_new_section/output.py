# Copyright header.

import torch
from torch.autograd import graph

from megatron import otel

from .local import helper


def run():
    _otel_span = otel.STEP and otel.start_span("demo.run")
    try:
        return helper(torch, graph)
    finally:
        _otel_span and _otel_span.end()
