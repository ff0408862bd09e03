"""Telemetry: megatron-otel-runtime when installed and reading this tree's _taxonomy.py (FORMAT), else
no-ops (group flags False); configure() then warns once if telemetry is on. From megatron-otel-codegen."""

import importlib.util
import logging
import os
import sys
from typing import Any

_RUNTIME, _WHY = "megatron_otel_runtime", ["not installed: pip install megatron-otel-runtime"]


def _load(name: str) -> Any:
    path = os.path.join(os.path.dirname(__file__), "_taxonomy.py")
    spec: Any = importlib.util.spec_from_file_location(name, path)
    sys.modules[name] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runtime() -> Any:
    spec: Any = importlib.util.find_spec(_RUNTIME)
    sys.modules[_RUNTIME] = package = importlib.util.module_from_spec(spec)
    version = importlib.import_module(_RUNTIME + "._version")
    found, reads = _load(_RUNTIME + "._taxonomy").FORMAT, version.TAXONOMY_FORMATS
    if found not in reads:
        raise ImportError(
            f"taxonomy format {found}; megatron-otel-runtime {version.VERSION} reads {reads}"
        )
    spec.loader.exec_module(package)
    return package


def configure(args: Any = None, **_: Any) -> frozenset[str]:
    """No groups; the first call with telemetry switched on warns why it stays off."""
    name, default = _taxonomy.ENV["enabled"][:2]
    flags = [o[0] for o in _taxonomy.FLAG_OVERRIDES if o[1] == name]
    on = os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")
    if (on or any(getattr(args, f, False) for f in flags)) and _WHY:
        logging.getLogger(__name__).warning("telemetry stays off: %s", _WHY.pop())
    return frozenset()


try:
    sys.modules[__name__] = (
        _runtime() if importlib.util.find_spec(_RUNTIME) else sys.modules[__name__]
    )
except Exception as error:  # noqa: BLE001  # a runtime this tree cannot use: no-ops, said once
    _WHY[0] = str(error)
if sys.modules[__name__].__name__ == __name__:  # the no-ops; the taxonomy's records read as tuples
    for _name in [n for n in sys.modules if n.partition(".")[0] == _RUNTIME]:
        del sys.modules[_name]
    sys.modules[__name__ + "._records"] = _records = type(sys)(__name__ + "._records")
    _tuple = type("_tuple", (tuple,), {"__new__": lambda cls, *fields: tuple.__new__(cls, fields)})
    setattr(_records, "__getattr__", lambda name: _tuple)  # noqa: B010
    _taxonomy = _load(__name__ + "._taxonomy")
    globals().update(dict.fromkeys([*_taxonomy.FLAGS.values(), "METRICS"], False))
    globals().update(traced=lambda *a, **k: lambda fn: fn, stamp=lambda key, value: value)
    globals().update(in_context=lambda fn: fn, in_worker=lambda fn: fn)
    globals().update(stream=lambda span, iterable: iterable)
    _NO_OPS = (  # named: a module __getattr__ keeps CPython from specializing the flag reads
        "begin_training disable enable enabled_groups end_training first_time in_training"
        " interval_loss max_memory_allocated_gb record_metrics reset resolve resource_attributes"
        " serve_app serve_attributes serve_error serve_response serve_span set_current_attributes"
        " setup_worker shutdown start_span startup train_iteration worker_bootstrap"
    )
    globals().update(dict.fromkeys(_NO_OPS.split(), lambda *args, **kwargs: None))
