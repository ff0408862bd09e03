"""Demo."""

__all__ = ["offload"]

import torch

import megatron.otel as _otel

# debugging switches
DEBUG = False

from megatron.core.utils import nvtx_range_push


def offload(tensor):
    _otel_span = _otel.LAYER and _otel.start_span("demo.offload")
    try:
        nvtx_range_push("offload")
        return tensor.cpu()
    finally:
        _otel_span and _otel_span.end()
