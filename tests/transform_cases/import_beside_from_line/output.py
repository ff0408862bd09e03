"""Module docstring."""

import os

import megatron.otel as _otel
from megatron import helpers, zeta
from megatron.sub import thing


def run():
    _otel_span = _otel.STEP and _otel.start_span("demo.run")
    try:
        return helpers.go(os.getcwd(), thing, zeta)
    finally:
        _otel_span and _otel_span.end()
