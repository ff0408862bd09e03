import warnings

import megatron.otel as _otel


def load(path, strict=False):
    _otel_span = _otel.IO and _otel.start_span("demo.load")
    try:
        if not strict:
            warnings.warn(f"{path}: loading leniently", UserWarning, stacklevel=2)
        return path
    finally:
        _otel_span and _otel_span.end()


def legacy(path):
    _otel_span = _otel.IO and _otel.start_span("demo.legacy")
    try:
        warnings.warn("legacy() is deprecated", DeprecationWarning, 2)
        return path
    finally:
        _otel_span and _otel_span.end()


def where():
    _otel_span = _otel.IO and _otel.start_span("demo.where")
    try:
        import sys

        return sys._getframe(1).f_code.co_name
    finally:
        _otel_span and _otel_span.end()
