import threading
from typing import overload

LOCK = threading.Lock()


class Model:
    @property
    def scale(self):
        return self._scale

    @scale.setter
    def scale(self, value):
        self._scale = value


@overload
def convert(x: int) -> int: ...


@overload
def convert(x: str) -> str: ...


def convert(x):
    return x


with LOCK:

    def locked(x):
        return x


for _kind in ("a",):

    def looped(x):
        return x
