"""An object alive until the interpreter clears the modules at exit: its ``__del__`` runs after
the names starting with an underscore (the runtime's among them) were set to None."""

import megatron.otel as _otel


class Resource:
    def __init__(self, name):
        self.name = name

    def __del__(self):
        _otel_span = _otel and _otel.STEP and _otel.start_span("demo.resource.release")
        try:
            print(f"released {self.name}", flush=True)
        finally:
            _otel_span and _otel_span.end()


kept = Resource("at exit")
