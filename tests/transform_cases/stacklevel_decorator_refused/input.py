import sys
import warnings


def load(path):
    warnings.warn(f"{path}: loading leniently", UserWarning, stacklevel=2)


def legacy():
    warnings.warn("legacy() is deprecated", DeprecationWarning, 2)


def where():
    return sys._getframe(1)
