import megatron.otel as _otel


def spaces(x):
    _otel_span = _otel.LAYER and _otel.start_span("demo.spaces")
    try:
        return x
    finally:
        _otel_span and _otel_span.end()


def tabs(items):
	_otel_span = _otel.LAYER and _otel.start_span("demo.tabs")
	try:
		for item in items:
			if item:
				_otel_span_2 = _otel.LAYER and _otel.start_span("demo.tabs.inner")
				try:
					print(item)
					_otel_span_2 and _otel_span_2.set_attributes(lambda: {"demo.count": len(items)})
				finally:
					_otel_span_2 and _otel_span_2.end()
		return len(items)
	finally:
		_otel_span and _otel_span.end()
