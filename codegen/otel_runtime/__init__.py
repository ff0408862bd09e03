"""OpenTelemetry spans for Megatron, switched on per span group.

An instrumented call site reads one group flag before anything else, so a disabled group costs a
single module attribute read (``otel`` is the name the instrumented modules import this package
as)::

    _otel_span = otel.LAYER and otel.start_span("megatron.layer.forward")
    try:
        ...
    finally:
        _otel_span and _otel_span.end()

Metric record sites read ``METRICS`` the same way::

    otel.METRICS and otel.record_metrics(lambda: {"megatron.training.loss": v})

``configure()`` turns groups on from the environment and the command line; ``startup()`` to
``end_training()`` drive the job's lifecycle spans; ``shutdown()`` and ``reset()`` end a run.
Everything here is a no-op when ``opentelemetry`` is not installed, and nothing raises into the
instrumented code. The group flags and ``SPANS`` come from ``_taxonomy``; ``GROUPS`` and ``PRESETS``
from ``_registry`` (Megatron-LM's own registry, ``megatron.core.telemetry``, when the tree has it).
"""

from __future__ import annotations

from . import _taxonomy
from ._version import TAXONOMY_FORMATS, VERSION

# A tree's taxonomy (dependency mode: the import shim hands over the tree's _taxonomy.py) is read
# only in a layout this version knows; else nothing more of the runtime runs and the shim says why.
if _taxonomy.FORMAT not in TAXONOMY_FORMATS:
    raise ImportError(
        f"taxonomy format {_taxonomy.FORMAT}; megatron-otel-runtime {VERSION} reads "
        + ", ".join(str(f) for f in TAXONOMY_FORMATS)
    )

from . import _registry
from ._config import resolve
from ._genai import (
    engine_step,
    serve_app,
    serve_attributes,
    serve_body,
    serve_error,
    serve_response,
    serve_span,
)
from ._lifecycle import (
    begin_training,
    end_training,
    first_time,
    in_context,
    in_training,
    set_current_attributes,
    stamp,
    startup,
    train_iteration,
)
from ._metrics import interval_loss, max_memory_allocated_gb, record_metrics
from ._process import reset, shutdown
from ._resource import resource_attributes
from ._setup import configure, in_worker, setup_worker, worker_bootstrap
from ._spans import disable, enable, enabled_groups, start_span, traced
from ._streams import stream

# A star import: the group flags differ per taxonomy, and linters see each as a package attribute.
from ._taxonomy import *  # noqa: F403

__all__ = [
    "METRICS",
    "begin_training",
    "configure",
    "disable",
    "enable",
    "enabled_groups",
    "end_training",
    "engine_step",
    "first_time",
    "in_context",
    "in_training",
    "in_worker",
    "interval_loss",
    "max_memory_allocated_gb",
    "record_metrics",
    "reset",
    "resolve",
    "resource_attributes",
    "serve_app",
    "serve_attributes",
    "serve_body",
    "serve_error",
    "serve_response",
    "serve_span",
    "set_current_attributes",
    "setup_worker",
    "shutdown",
    "stamp",
    "start_span",
    "startup",
    "stream",
    "traced",
    "train_iteration",
    "worker_bootstrap",
]
__all__ += ["GROUPS", "PRESETS", "SPANS"]
__all__ += list(_taxonomy.FLAGS.values())  # the group flags
SPANS = _taxonomy.SPANS

# The groups and presets resolved: Megatron-LM's own registry when the tree has one (_registry).
GROUPS = _registry.GROUPS
PRESETS = _registry.PRESETS

# True while metrics record (the exporting rank, metrics enabled); set only by configure().
METRICS = False
