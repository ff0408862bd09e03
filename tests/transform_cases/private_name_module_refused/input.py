import json as _otel


def run(x):
    return _otel.dumps(x, sort_keys=True)
