def configure(**options):
    return dict(options)


def setup(flag):
    settings = configure(_otel=flag, _otel_span=None)
    return settings
