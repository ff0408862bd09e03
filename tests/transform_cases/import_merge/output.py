"""Module docstring."""

import os

from megatron import helpers, otel, zeta
from megatron.sub import thing


def run():
    _otel_span = otel.STEP and otel.start_span("demo.run")
    try:
        return helpers.go(os.getcwd(), thing, zeta)
    finally:
        _otel_span and _otel_span.end()
