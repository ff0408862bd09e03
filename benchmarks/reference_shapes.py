"""Hand-written guard shapes measured beside the generated code (stdlib + opentelemetry only).

- ``if FLAG:`` — the cheapest conceivable guard;
- ``_otel_managed_span(group, name)`` — the reference instrumentation's shape: a generator-based
  ``@contextmanager`` that imports its state inside the function and checks a frozenset;
- ``trace_fn(group, name)`` — the reference's decorator wrapper checking a frozenset per call;
- ``start_as_current_span`` — the OpenTelemetry SDK's own context manager, the enabled baseline.

The workloads repeat the bodies of ``fixture/src/megatron/benchfix/work.py``.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

# The state module the reference imports inside its helpers (a real module, as nemo.lens.state is:
# a module without __spec__ would make every function-local import raise and swallow an error).
import reference_state as _STATE

FLAG = False
TRACER = None  # set by the worker to a tracer of the benchmark's SDK provider


@contextmanager
def _otel_managed_span(group, name):
    from reference_state import ENABLED_GROUPS

    if group not in ENABLED_GROUPS:
        yield None
        return
    with TRACER.start_as_current_span(name) as span:
        yield span


def trace_fn(group, name):
    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if group not in _STATE.ENABLED_GROUPS:
                return func(*args, **kwargs)
            with TRACER.start_as_current_span(name):
                return func(*args, **kwargs)

        return wrapper

    return decorator


# -- the "empty" workload (one local store) ---------------------------------------------------


def empty_if_flag():
    if FLAG:
        raise AssertionError("FLAG is never set")
    result = None


def empty_managed_span():
    with _otel_managed_span("statement", "bench.empty.statement"):
        result = None


@trace_fn("function", "bench.empty.function")
def empty_trace_fn():
    result = None


def empty_sdk():
    with TRACER.start_as_current_span("bench.empty.sdk"):
        result = None


def empty_sdk_attributes():
    with TRACER.start_as_current_span("bench.empty.sdk", attributes={"megatron.span_group": "recording"}):
        result = None


# -- the "small" workload ---------------------------------------------------------------------


def small_if_flag(values):
    if FLAG:
        raise AssertionError("FLAG is never set")
    total = 0
    for value in values:
        total += value * value
    scaled = [value * 0.5 for value in values]
    return total + scaled[-1]


def small_managed_span(values):
    total = 0
    for value in values:
        total += value * value
    with _otel_managed_span("statement", "bench.small.statement"):
        scaled = [value * 0.5 for value in values]
    return total + scaled[-1]


@trace_fn("function", "bench.small.function")
def small_trace_fn(values):
    total = 0
    for value in values:
        total += value * value
    scaled = [value * 0.5 for value in values]
    return total + scaled[-1]


def small_sdk(values):
    with TRACER.start_as_current_span("bench.small.sdk"):
        total = 0
        for value in values:
            total += value * value
        scaled = [value * 0.5 for value in values]
        return total + scaled[-1]
