"""An object alive until the interpreter clears the modules at exit, whose ``__del__`` calls
methods of its own: they run after the names starting with an underscore (the runtime's among
them) were set to None, as the ``__del__`` does."""

import megatron.otel as _otel


class Resource:
    def __init__(self, name):
        self.name = name

    def close(self):
        _otel_span = _otel and _otel.STEP and _otel.start_span("demo.resource.close")
        try:
            self._flush()
            print(f"closed {self.name}", flush=True)
        finally:
            _otel_span and _otel_span.end()

    def _flush(self):
        _otel and _otel.reset()
        self.name.strip()
        _otel_span = _otel and _otel.STEP and _otel.start_span("demo.resource.flush")
        try:
            print(f"flushed {self.name}", flush=True)
            type(self)._log(self)
        finally:
            _otel_span and _otel_span.end()

    def _log(self):
        _otel_span = _otel and _otel.STEP and _otel.start_span("demo.resource.log")
        try:
            print(f"logged {self.name}", flush=True)
        finally:
            _otel_span and _otel_span.end()

    def reopen(self):
        _otel_span = _otel.STEP and _otel.start_span("demo.resource.reopen")
        try:
            print(f"reopened {self.name}", flush=True)
        finally:
            _otel_span and _otel_span.end()

    def __del__(self):
        self.close()


kept = Resource("at exit")
