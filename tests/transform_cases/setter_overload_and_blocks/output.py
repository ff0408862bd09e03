import threading
from typing import overload

import megatron.otel as _otel

LOCK = threading.Lock()


class Model:
    @property
    def scale(self):
        _otel_span = _otel.LAYER and _otel.start_span("demo.scale.get")
        try:
            return self._scale
        finally:
            _otel_span and _otel_span.end()

    @scale.setter
    def scale(self, value):
        _otel_span = _otel.LAYER and _otel.start_span("demo.scale.set")
        try:
            self._scale = value
        finally:
            _otel_span and _otel_span.end()


@overload
def convert(x: int) -> int: ...


@overload
def convert(x: str) -> str: ...


def convert(x):
    _otel_span = _otel.LAYER and _otel.start_span("demo.convert")
    try:
        return x
    finally:
        _otel_span and _otel_span.end()


with LOCK:

    def locked(x):
        _otel_span = _otel.LAYER and _otel.start_span("demo.locked")
        try:
            return x
        finally:
            _otel_span and _otel_span.end()


for _kind in ("a",):

    def looped(x):
        _otel_span = _otel.LAYER and _otel.start_span("demo.looped")
        try:
            return x
        finally:
            _otel_span and _otel_span.end()
