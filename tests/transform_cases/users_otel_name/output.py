"""A module with a name of its own called otel: the runtime is imported as _otel, so it stays."""

import megatron.otel as _otel


class _Store(dict):
    def reset(self):
        self.clear()


otel = _Store(calls=0)


def count(step):
    _otel_span = _otel.STEP and _otel.start_span("demo.count")
    try:
        otel["calls"] += step
        return otel["calls"]
    finally:
        _otel_span and _otel_span.end()


def doubled(x):
    _otel_span = _otel.STEP and _otel.start_span("demo.doubled")
    try:
        otel = x * 2
        return otel + 1
    finally:
        _otel_span and _otel_span.end()


def reset():
    _otel.reset()
    global otel
    otel = _Store(calls=0)


def clear():
    otel.clear()
    otel.update(calls=0)


def total(key):
    _otel.reset()
    otel.reset()
    otel.setdefault(key, 0)
    return otel.get(key)


class Holder:
    otel = "attribute"

    @staticmethod
    @_otel.traced("demo.decorated")
    def decorated(y):
        return y - 1
