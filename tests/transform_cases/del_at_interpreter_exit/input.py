"""An object alive until the interpreter clears the modules at exit: its ``__del__`` runs after
the names starting with an underscore (the runtime's among them) were set to None."""


class Resource:
    def __init__(self, name):
        self.name = name

    def __del__(self):
        print(f"released {self.name}", flush=True)


kept = Resource("at exit")
