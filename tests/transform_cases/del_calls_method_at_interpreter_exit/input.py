"""An object alive until the interpreter clears the modules at exit, whose ``__del__`` calls
methods of its own: they run after the names starting with an underscore (the runtime's among
them) were set to None, as the ``__del__`` does."""


class Resource:
    def __init__(self, name):
        self.name = name

    def close(self):
        self._flush()
        print(f"closed {self.name}", flush=True)

    def _flush(self):
        print(f"flushed {self.name}", flush=True)
        type(self)._log(self)

    def _log(self):
        print(f"logged {self.name}", flush=True)

    def reopen(self):
        print(f"reopened {self.name}", flush=True)

    def __del__(self):
        self.close()


kept = Resource("at exit")
