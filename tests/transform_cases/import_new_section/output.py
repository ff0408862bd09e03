# Copyright header.

import torch
from torch.autograd import graph

import megatron.otel as _otel

from .local import helper


def run():
    _otel_span = _otel.STEP and _otel.start_span("demo.run")
    try:
        return helper(torch, graph)
    finally:
        _otel_span and _otel_span.end()
