"""The methods the ``__del__`` calls run their bodies at the interpreter's final clearing of
modules as the pristine ones do, with the runtime's name already None, telemetry off or on."""

from tests.generator.support import check_at_final_clearing


def check(before, after, otel, exporter):
    check_at_final_clearing(before, after, "flushed at exit\nlogged at exit\nclosed at exit\n")
