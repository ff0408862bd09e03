"""The instrumented ``__del__`` runs its body at the interpreter's final clearing of modules as the
pristine one does, with the runtime's name already None, telemetry off or on."""

from tests.generator.support import check_at_final_clearing


def check(before, after, otel, exporter):
    check_at_final_clearing(before, after, "released at exit\n")
