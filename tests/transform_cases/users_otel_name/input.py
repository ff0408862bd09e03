"""A module with a name of its own called otel: the runtime is imported as _otel, so it stays."""

class _Store(dict):
    def reset(self):
        self.clear()


otel = _Store(calls=0)


def count(step):
    otel["calls"] += step
    return otel["calls"]


def doubled(x):
    otel = x * 2
    return otel + 1


def reset():
    global otel
    otel = _Store(calls=0)


def clear():
    otel.clear()
    otel.update(calls=0)


def total(key):
    otel.reset()
    otel.setdefault(key, 0)
    return otel.get(key)


class Holder:
    otel = "attribute"

    @staticmethod
    def decorated(y):
        return y - 1
