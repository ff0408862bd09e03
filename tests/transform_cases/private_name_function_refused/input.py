def local(x):
    _otel = x
    return _otel


class Holder:
    _otel = 1

    def method(self, y):
        return y
