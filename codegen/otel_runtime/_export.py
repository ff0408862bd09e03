"""Export: the SDK providers, exporters, batch span processor and metric reader the runtime builds,
with the configured timeouts and queue limits; the bounded flush and shutdown; span accounting.

Nothing here runs on a training thread but ``on_end`` (a length check and a queue append): the
SDK's batch thread exports spans, the metric reader's thread exports metrics. When the collector is
down, slow or refusing:

- an export (the exporter's retries included) gives up after ``export_timeout`` seconds;
- at most ``span_queue_size`` ended spans wait in memory; a span ended while the queue is full is
  dropped and counted: logged once when the queue first fills, the totals once at shutdown;
- shutdown (the end of the run, interpreter exit) flushes and shuts the providers down within
  ``flush_timeout`` seconds in all, then gives up what is still queued; a flush on SIGTERM is
  bounded by its own timeout.

The bound at exit needs no new thread (Python 3.12 refuses to start one during interpreter exit):
the SDK's own batch and reader threads do the exporting, and shutting them down joins them for
at most the time left.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import _ids, _lean_install, _spans
from ._state import PROCESS, log_once

# Standard variables that give the OTLP exporters a timeout of their own (the SDK reads them).
_STANDARD_TIMEOUTS = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_{SIGNAL}_TIMEOUT")


def tracer_provider(settings: Any, resource: Any) -> tuple[Any, list[Any]]:
    """An SDK TracerProvider exporting through a bounded batch processor, and that processor
    (to shut down with a timeout: ``shutdown_providers``); None and [] without the SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    except ImportError:
        log_once("sdk", "opentelemetry-sdk is not installed: using the global providers")
        return None, []
    processors = []
    provider = TracerProvider(
        resource=resource, shutdown_on_exit=False, id_generator=_ids.generator()
    )
    if settings.exporter_for("trace") == "console":
        exporter = ConsoleSpanExporter()
    else:
        exporter = otlp_exporter(settings, "trace", "Span")
    if exporter is None:
        PROCESS.run.recording_reason = "no span exporter (MEGATRON_OTEL_EXPORTER=none)"
    elif not _lean_install.usable(provider, settings.recording):
        PROCESS.run.recording_reason = (
            "MEGATRON_OTEL_RECORDING=sdk"
            if settings.recording == "sdk" or not _lean_install.ALLOWED
            else f"the sampler is {provider.sampler!r} (OTEL_TRACES_SAMPLER)"
        )
    if exporter is not None and _lean_install.usable(provider, settings.recording):
        # the lean path: the recorder is the provider's processor (see _lean_install)
        processors.append(
            _lean_install.install(provider, exporter, settings.export, _spans.SPAN_ATTRIBUTES)
        )
    elif exporter is not None:
        limits = settings.export
        processor = _processor_class()(
            exporter,
            max_queue_size=limits.span_queue_size,
            schedule_delay_millis=limits.span_schedule_delay_ms,
            max_export_batch_size=limits.span_batch_size,
            export_timeout_millis=limits.export_timeout * 1000,
        )
        provider.add_span_processor(processor)
        processors.append(processor)
    return provider, processors


def meter_provider(settings: Any, resource: Any) -> Any:
    """An SDK MeterProvider with a periodic reader at the configured interval; None without the
    SDK."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )
    except ImportError:
        log_once("sdk", "opentelemetry-sdk is not installed: using the global providers")
        return None
    if settings.exporter_for("metric") == "console":
        exporter = ConsoleMetricExporter()
    else:
        exporter = otlp_exporter(settings, "metric", "Metric")
    readers = []
    if exporter is not None:
        limits = settings.export
        readers.append(
            PeriodicExportingMetricReader(
                exporter,
                export_interval_millis=limits.metric_export_interval_ms,
                export_timeout_millis=limits.export_timeout * 1000,
            )
        )
    return MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)


def otlp_exporter(settings: Any, signal: str, kind: str) -> Any:
    """The OTLP exporter for ``signal``, over the protocol OTEL_EXPORTER_OTLP_*PROTOCOL names.

    Its timeout is ``export_timeout`` unless only a standard OTEL_EXPORTER_OTLP_*TIMEOUT is set.
    """
    if settings.exporter_for(signal) != "otlp":
        return None
    protocol = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}S_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"
    )
    order = ("http", "grpc") if protocol.startswith("http") else ("grpc", "http")
    options: dict[str, Any] = {}
    standard = [name.format(SIGNAL=signal.upper() + "S") for name in _STANDARD_TIMEOUTS]
    if settings.export.export_timeout_given or not any(os.environ.get(n) for n in standard):
        options["timeout"] = settings.export.export_timeout
    for transport in order:
        module = f"opentelemetry.exporter.otlp.proto.{transport}.{signal}_exporter"
        try:
            return getattr(importlib.import_module(module), f"OTLP{kind}Exporter")(**options)
        except ImportError:
            continue
        except Exception:
            log_once(f"otlp-{signal}", "creating the OTLP exporter failed", exc_info=True)
            return None
    log_once(
        f"otlp-{signal}",
        "no OTLP exporter installed (opentelemetry-exporter-otlp): %ss are not exported",
        signal,
    )
    return None


def shutdown_providers(
    owned: Sequence[Any], borrowed: Sequence[Any], processors: Sequence[Any], timeout: float
) -> None:
    """Flush ``borrowed`` and shut ``owned`` down (which exports what they hold) within ``timeout``
    seconds in all, the bounded batch ``processors`` of the owned tracer provider first; then log
    what was not exported. Never raises."""
    deadline = time.monotonic() + timeout
    if borrowed:
        flush_providers(borrowed, timeout)
    for processor in processors:
        _call(processor, "shutdown", max(0.0, deadline - time.monotonic()) * 1000)
    for provider in owned:
        remaining_ms = max(0.0, deadline - time.monotonic()) * 1000
        if hasattr(provider, "get_meter"):  # a MeterProvider: its shutdown takes a timeout
            # at least a moment: with none left it raises instead of returning
            _call(provider, "shutdown", max(remaining_ms, 1.0))
        else:
            _call(provider, "shutdown")
    for processor in processors:
        processor.report(timeout)


def flush_providers(providers: Sequence[Any], timeout: float) -> bool:
    """Flush ``providers`` on a helper thread for at most ``timeout`` seconds; False when that was
    not enough (the flush goes on in the background).

    Where no thread can start (interpreter exit, Python >= 3.12), the flush runs here, bounded
    only as far as the providers bound it themselves.
    """
    millis = int(timeout * 1000)

    def flush() -> None:
        for provider in providers:
            _call(provider, "force_flush", millis)

    try:
        thread = threading.Thread(target=flush, name="megatron-otel-flush", daemon=True)
        thread.start()
    except RuntimeError:  # interpreter exit (Python >= 3.12): no new threads
        flush()
        return True
    thread.join(timeout)
    if thread.is_alive():
        log_once(
            "flush-timeout",
            "flushing did not finish within %.1f s: the collector is slow or unreachable",
            timeout,
        )
        return False
    return True


def span_queue_lengths(processors: Sequence[Any]) -> list[int]:
    """How many spans wait in each bounded batch processor (a run's ``processors``; measuring)."""
    return [processor.queued() for processor in processors]


def _call(target: Any, method: str, *args: Any) -> None:
    try:
        getattr(target, method)(*args)
    except Exception:
        log_once(f"{method}:{id(target)}", "%s failed", method, exc_info=True)


def _processor_class() -> Any:
    """``BoundedBatchSpanProcessor`` (``_batch``), defined on first use (the SDK is optional)."""
    if PROCESS.processor_class is None:
        from ._batch import bounded_processor_class

        PROCESS.processor_class = bounded_processor_class()
    return PROCESS.processor_class
