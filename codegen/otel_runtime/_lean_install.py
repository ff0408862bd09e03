"""Installing the lean recording path, and borrowing a provider for it.

The runtime's spans record lean (``_lean_tracer``, ``_lean_span``, ``_lean_recorder``) when the
runtime builds the providers itself (no program- or distro-set global tracer provider, or
``MEGATRON_OTEL_OWN_PROVIDERS=1``) with the default sampler (``usable``), and on a provider the
program or ``opentelemetry-instrument`` set up the standard way (``borrowable``: the rule), whose
exporter the recorder then shares (``share_exporter``); any other provider gets the SDK path
(``_spans``). ``install`` makes a provider record lean; ``tracer`` gives the tracer its spans
record with.

The buffers are bounded (``span_queue_size`` ended spans per thread; a span ended while its
thread's buffer is full is dropped and counted, as the batch processor does), the export thread
sends batches of ``span_batch_size`` every ``span_schedule_delay`` or as soon as a batch is full,
``force_flush``/``shutdown`` take timeouts, and a forked child drops what its parent had buffered
(``_batching``).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from ._lean_recorder import LeanRecorder
from ._lean_tracer import LeanTracer

# False: the runtime's own provider records through the SDK path too (the benchmarks flip it).
ALLOWED = True
# The TracerProviders that record lean -> their recorder.
_BY_PROVIDER: weakref.WeakKeyDictionary[Any, LeanRecorder] = weakref.WeakKeyDictionary()


def usable(provider: Any, recording: str = "auto") -> bool:
    """Whether spans of ``provider`` (an SDK TracerProvider the runtime built) may record lean:
    the lean path is allowed (``recording`` is not ``sdk``) and the provider samples everything
    its parents sample (``recording`` ``lean``: whatever its sampler)."""
    if not ALLOWED or recording == "sdk":
        return False
    sampler = getattr(provider, "sampler", None)
    try:
        from opentelemetry.sdk.trace import sampling
    except ImportError:
        return False

    return recording == "lean" or sampler is sampling.DEFAULT_ON or sampler is sampling.ALWAYS_ON


# The exporters opentelemetry-instrument's configurator builds from OTEL_TRACES_EXPORTER that the
# lean path sends through unasked (``recording`` auto): (module prefix, class name).
_STANDARD_EXPORTERS = (
    ("opentelemetry.exporter.otlp.proto.http", "OTLPSpanExporter"),
    ("opentelemetry.exporter.otlp.proto.grpc", "OTLPSpanExporter"),
    ("opentelemetry.sdk.trace.export", "ConsoleSpanExporter"),
)


def borrowable(provider: Any, recording: str = "auto") -> tuple[Any, Any] | str:
    """``(exporter, span limits)`` when spans of ``provider``, a TracerProvider the program or
    the OpenTelemetry distro set (``opentelemetry-instrument``), may record lean and be sent
    through ``exporter``, the provider's own; else why they take the SDK path.

    With ``recording`` auto: the SDK's own ``TracerProvider`` (not a subclass), not disabled, with
    the default tracer configuration, the default sampler (``parentbased_always_on``, or
    ``always_on``), the default id generator, and one span processor, the SDK's own
    ``BatchSpanProcessor`` or ``SimpleSpanProcessor`` (not a subclass), over an OTLP (HTTP or
    gRPC) or console span exporter: what the distro builds from the ``OTEL_*`` variables. With
    ``lean``: the same, but any sampler, id generator and exporter. With ``sdk``: never.

    Anything else stays on the SDK path, since the lean path would change what it does: another
    processor sees each span start and end (to enrich, filter, redact or count spans: the lean
    path calls no processor per span); another sampler decides per span (no sampler runs per lean
    span); another id generator makes ids with a meaning (X-Ray's carry a time); another exporter
    may rely on the SDK's span objects or on being called by its processor alone."""
    if not ALLOWED or recording == "sdk":
        return "the SDK path is asked for" if recording == "sdk" else "the lean path is off"
    try:
        from opentelemetry.sdk import trace as sdk_trace
        from opentelemetry.sdk.trace import export as sdk_export
        from opentelemetry.sdk.trace import id_generator, sampling
    except ImportError:
        return "the OpenTelemetry SDK is not installed"
    if type(provider) is not sdk_trace.TracerProvider:
        return f"the provider is a {type(provider).__qualname__}, not the SDK's TracerProvider"
    if getattr(provider, "_disabled", False):
        return "the SDK is disabled (OTEL_SDK_DISABLED)"
    default_configurator = getattr(sdk_trace, "_default_tracer_configurator", None)
    if getattr(provider, "_tracer_configurator", default_configurator) is not default_configurator:
        return "the provider has a tracer configurator"
    if recording != "lean":
        sampler = getattr(provider, "sampler", None)
        if sampler is not sampling.DEFAULT_ON and sampler is not sampling.ALWAYS_ON:
            return f"the provider's sampler is {type(sampler).__name__} ({sampler!r})"
        if type(getattr(provider, "id_generator", None)) is not id_generator.RandomIdGenerator:
            return "the provider has another id generator"
    # The provider's processors: no public accessor (SDK 1.27-1.45 keep them here).
    active = getattr(provider, "_active_span_processor", None)
    processors = getattr(active, "_span_processors", None)
    multi = (sdk_trace.SynchronousMultiSpanProcessor, sdk_trace.ConcurrentMultiSpanProcessor)
    if type(active) not in multi or not isinstance(processors, tuple):
        return "the provider's span processors cannot be read"
    if len(processors) != 1:
        return f"the provider has {len(processors)} span processors, not one"
    (processor,) = processors
    if type(processor) not in (sdk_export.BatchSpanProcessor, sdk_export.SimpleSpanProcessor):
        return f"the provider's span processor is a {type(processor).__qualname__}"
    exporter = getattr(processor, "span_exporter", None)
    if exporter is None:
        return "the provider's span processor has no exporter"
    kind = type(exporter)
    standard = any(
        kind.__module__.startswith(module) and kind.__name__ == name
        for module, name in _STANDARD_EXPORTERS
    )
    if recording != "lean" and not standard:
        return f"the provider's exporter is a {kind.__qualname__}"
    limits = getattr(provider, "_span_limits", None)  # the provider's own (no public accessor)
    if not isinstance(limits, sdk_trace.SpanLimits):
        limits = sdk_trace.SpanLimits()  # what a provider built without limits has
    return exporter, limits


def install(
    provider: Any,
    exporter: Any,
    limits: Any,
    base_attributes: Mapping[str, Mapping[str, Any]],
    span_limits: Any = None,
    borrowed: bool = False,
) -> LeanRecorder:
    """Make ``provider`` record lean, exporting through ``exporter`` within the run's export
    limits (``ExportLimits``), every span of a name starting with that name's
    ``base_attributes``, attributes limited by ``span_limits`` (default: the SDK's defaults).

    A provider the runtime built: the recorder is its processor. A ``borrowed`` one (the
    program's or the distro's, ``borrowable``): its own processor stays and exports the SDK spans
    of the provider (the lifecycle spans, anyone else's); the recorder sends the lean spans through
    the same exporter, never at the same time as that processor (``share_exporter``), and leaves
    the exporter to the provider to shut down."""
    recorder = LeanRecorder(
        exporter,
        provider.resource,
        base_attributes,
        max_queue_size=limits.span_queue_size,
        max_export_batch_size=limits.span_batch_size,
        schedule_delay_millis=limits.span_schedule_delay_ms,
        export_timeout_millis=limits.export_timeout * 1000,
        limits=span_limits,
        borrowed=borrowed,
    )
    if borrowed:
        recorder.release = _release
        try:
            share_exporter(recorder)
        except Exception as error:  # its export cannot be wrapped: the thread stops, unused
            recorder.done = True
            recorder.wake.set()
            name = type(exporter).__name__
            raise TypeError(f"the exporter {name} cannot be shared ({error})") from None
    else:
        provider.add_span_processor(recorder)
    _BY_PROVIDER[provider] = recorder
    recorder.provider = weakref.ref(provider)
    return recorder


def share_exporter(recorder: LeanRecorder) -> None:
    """Make every call of the borrowed exporter's ``export`` (its processor's, on that
    processor's thread, or on any thread for the simple processor) hold the recorder's
    ``exporter_lock``, which the recorder's own sends hold too: the exporter is never driven from
    two threads at once. The SpanExporter interface is ``export``, ``force_flush`` and
    ``shutdown``; only ``export`` sends (the OTLP exporters' ``force_flush`` sends nothing, and
    ``shutdown`` must not wait behind a send: it interrupts the exporter's retries)."""
    exporter = recorder.exporter
    original = exporter.export

    def export(spans: Sequence[Any]) -> Any:
        with recorder.exporter_lock:
            return original(spans)

    export.__wrapped__ = original  # type: ignore[attr-defined]
    exporter.export = export


def unshare_exporter(recorder: LeanRecorder) -> None:
    """Give the borrowed exporter its own ``export`` back (the recorder sends no more)."""
    try:
        if "export" in vars(recorder.exporter):
            del recorder.exporter.export
    except Exception:
        pass


def _release(recorder: LeanRecorder, finished: bool) -> None:
    """A borrowed recorder shut down (or in a forked child): its provider decides afresh in a
    later run; the exporter gets its own ``export`` back once the recorder's thread ``finished``
    (else its last send still needs the lock)."""
    provider = recorder.provider() if recorder.provider is not None else None
    if provider is not None and _BY_PROVIDER.get(provider) is recorder:
        del _BY_PROVIDER[provider]
    if finished:
        unshare_exporter(recorder)


def tracer(provider: Any, sdk_tracer: Any) -> Any:
    """The tracer spans of ``provider`` record with: a LeanTracer when the runtime made
    ``provider`` record lean, else ``sdk_tracer`` (the SDK path)."""
    try:
        recorder = _BY_PROVIDER.get(provider) if provider is not None else None
    except TypeError:  # not weakly referenceable: not ours
        recorder = None
    return sdk_tracer if recorder is None else LeanTracer(recorder, sdk_tracer)
