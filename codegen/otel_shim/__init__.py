"""Telemetry: megatron-otel-runtime when it is installed and reads this tree's _taxonomy.py, else
the no-ops below (one warning if telemetry is switched on). From megatron-otel-codegen."""

import importlib.util
import logging
import os
import sys
from collections import namedtuple
from types import ModuleType

# _taxonomy.py imports its record types from ._records: the runtime's named tuples, made here.
sys.modules[__name__ + "._records"] = _records = ModuleType(__name__ + "._records")
_records.Backdated = namedtuple("Backdated", ["name", "flag", "start", "end"])
_records.EnvVar = namedtuple("EnvVar", ["name", "default", "choices"])
_records.FlagOverride = namedtuple("FlagOverride", ["dest", "env", "option", "switch"])
_records.Instrument = namedtuple("Instrument", ["kind", "unit", "description"])
_records.Interval = namedtuple("Interval", ["name", "flag"])
_records.Span = namedtuple("Span", ["group", "goodput"])
_records.Startup = namedtuple("Startup", ["name", "flag", "start"])

from . import _taxonomy  # noqa: E402
from ._taxonomy import *  # noqa: E402,F403  # the group flags (False) and the taxonomy's constants

METRICS = False
_WHY = ["not installed: pip install megatron-otel-runtime"]  # configure() says it once
if importlib.util.find_spec("megatron_otel_runtime"):
    sys.modules["megatron_otel_runtime._taxonomy"] = _taxonomy  # read by the runtime as its own
    try:
        import megatron_otel_runtime  # ImportError naming both when it cannot read _taxonomy.FORMAT
    except Exception as error:  # noqa: BLE001  # a runtime this tree cannot use: no-ops, said once
        _WHY[0] = str(error)
    else:  # call sites then read the flags configure() sets as this module's: one attribute load
        sys.modules[__name__] = megatron_otel_runtime


def configure(args=None, **kwargs):
    """No span groups: the first call with telemetry switched on says why it stays off."""
    name, default, _ = _taxonomy.ENV["enabled"]
    switches = [override.dest for override in _taxonomy.FLAG_OVERRIDES if override.env == name]
    on = os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")
    if _WHY and (on or any(getattr(args, dest, False) for dest in switches)):
        logging.getLogger(__name__).warning("telemetry stays off: %s", _WHY.pop())
    return frozenset()


def traced(*args, **kwargs):
    """A decorator that leaves the function as it is."""
    return _as_is


def _as_is(*args):
    """The last argument as it is: in_context's function, stamp's value, stream's iterable..."""
    return args[-1]


def _nothing(*args, **kwargs):
    """Nothing: telemetry is off."""


in_context = in_worker = serve_body = stamp = stream = _as_is
begin_training = disable = enable = enabled_groups = end_training = engine_step = _nothing
first_time = in_training = interval_loss = max_memory_allocated_gb = record_metrics = _nothing
reset = resolve = resource_attributes = set_current_attributes = setup_worker = shutdown = _nothing
serve_app = serve_attributes = serve_error = serve_response = serve_span = _nothing
start_span = startup = train_iteration = worker_bootstrap = _nothing
