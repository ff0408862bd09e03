"""Metric instruments: created once per meter, with their units; recorded on the exporting rank."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._genai import BUCKETS
from ._state import PROCESS, Recorder, flag, log_once
from ._taxonomy import INSTRUMENTS

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter

LM_LOSS_KEY = "lm loss"


def create_instruments(meter: Meter) -> None:
    """Make ``meter``'s instruments current, creating them the first time this meter is seen."""
    cached = PROCESS.meters.get(id(meter))
    if cached is None or cached[0] is not meter:
        recorders = {name: _instrument(meter, name, *spec) for name, spec in INSTRUMENTS.items()}
        cached = PROCESS.meters[id(meter)] = (meter, recorders)
    PROCESS.run.recorders = cached[1]


def clear() -> None:
    """Stop recording into the current meter's instruments."""
    PROCESS.run.recorders = {}


def record_metrics(values: Callable[[], Mapping[str, float | int | None]]) -> None:
    """Record ``values()`` by instrument name: histograms record, gauges set, counters add values
    above zero; ``None`` is skipped, an unknown name logged once. Never raises."""
    if not flag("METRICS"):
        return
    try:
        items = values().items()
    except Exception:
        log_once("metrics", "evaluating metric values failed", exc_info=True)
        return
    for name, value in items:
        if value is None:
            continue
        recorder = PROCESS.run.recorders.get(name)
        if recorder is None:
            log_once(f"metric:{name}", "no metric instrument named %r; value dropped", name)
            continue
        try:
            recorder(value)
        except Exception:
            log_once(f"record:{name}", "recording metric %r failed", name, exc_info=True)


def interval_loss(total_loss_dict: Mapping[str, Any], iterations_key: str) -> float | None:
    """The interval's average of the canonical ``lm loss`` key; None when the model reports none.

    (The reference took whichever loss key came first, which changes with the model.)
    """
    loss = total_loss_dict.get(LM_LOSS_KEY)
    if loss is None:
        return None
    value = loss.item() if hasattr(loss, "item") else float(loss)
    return float(value) / max(1, int(total_loss_dict.get(iterations_key, 1)))


def max_memory_allocated_gb() -> float | None:
    """Peak accelerator memory allocated, in GB; None without CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return float(torch.cuda.max_memory_allocated()) / 2**30


def _instrument(meter: Meter, name: str, kind: str, unit: str, description: str) -> Recorder:
    if kind == "histogram":
        # the GenAI conventions' bucket boundaries (the API takes the advice from 1.23 on)
        buckets = BUCKETS.get(name)
        if buckets is not None:
            try:
                return meter.create_histogram(
                    name,
                    unit=unit,
                    description=description,
                    explicit_bucket_boundaries_advisory=list(buckets),
                ).record
            except TypeError:
                pass
        return meter.create_histogram(name, unit=unit, description=description).record
    if kind == "counter":
        add = meter.create_counter(name, unit=unit, description=description).add
        return lambda value: value > 0 and add(value)
    if hasattr(meter, "create_gauge"):
        return meter.create_gauge(name, unit=unit, description=description).set
    from opentelemetry.metrics import Observation

    def observe(options: CallbackOptions) -> list[Observation]:
        value = PROCESS.gauge_values.get(name)
        return [] if value is None else [Observation(value)]

    meter.create_observable_gauge(name, callbacks=[observe], unit=unit, description=description)
    return lambda value: PROCESS.gauge_values.__setitem__(name, value)
