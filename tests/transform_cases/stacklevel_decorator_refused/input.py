import warnings


def load(path, strict=False):
    if not strict:
        warnings.warn(f"{path}: loading leniently", UserWarning, stacklevel=2)
    return path


def legacy(path):
    warnings.warn("legacy() is deprecated", DeprecationWarning, 2)
    return path


def where():
    import sys

    return sys._getframe(1).f_code.co_name
