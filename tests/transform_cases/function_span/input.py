import math


def work(x, *, scale=2):
    """Scale x.

    Several lines of docstring.
    """
    y = x * scale
    return math.floor(y)


def untouched():
    return 1
