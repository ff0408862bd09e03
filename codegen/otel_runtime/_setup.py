"""configure(): settings -> enabled groups, SDK providers and exporters, instruments, exit hooks;
and the bootstrap that sets telemetry up in the async checkpoint worker."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from . import _export, _lean_install, _metrics, _process, _ranks
from ._config import ExportLimits, Settings, rank_and_world, rank_sampled, read_settings
from ._registry import GROUPS
from ._resource import resource_attributes
from ._spans import OTEL_INSTALLED, SPAN_ATTRIBUTES, enabled_groups, select
from ._state import LOG, PROCESS, flag, log_once, set_flag
from ._taxonomy import ENV
from ._version import SCHEMA_URL, SCOPE, VERSION


def configure(
    args: Any = None, *, tracer_provider: Any = None, meter_provider: Any = None
) -> frozenset[str]:
    """Set telemetry up from the environment and ``args`` (flags win); return the enabled groups.

    Groups a program turned on itself with ``enable()`` win: they are kept, nothing else is set up
    (logged once). Invalid settings raise ``ValueError`` on every rank. Only the exporting rank
    records: the others get no groups, no instruments and no providers. Without a provider argument
    the SDK's are built (exporter, service name, resource attributes) when the SDK is installed.
    """
    settings = read_settings(args)
    rank, world = rank_and_world()
    coordinates = _ranks.coordinates(rank, world, args)
    exporting = settings.export_ranks.selects(rank, world, coordinates)  # raises on every rank
    # Every rank takes part (the same settings everywhere) when more than one rank may export.
    run_id = (
        _ranks.agree_run_id(world)
        if settings.enabled and settings.export_ranks.many()
        else os.urandom(16)
    )
    if PROCESS.run.programmatic and not PROCESS.run.ended:
        groups = enabled_groups()
        log_once(
            "programmatic",
            "configure(): keeping the span groups enable() turned on (%s); the --otel-* flags and "
            "environment variables are not applied (call otel.disable() first to apply them)",
            ", ".join(sorted(groups)),
        )
        return groups
    _process.reset()  # a fresh run: the current one ends, if it has not
    if not settings.enabled or not exporting:
        return frozenset()
    run = PROCESS.run
    run.settings = settings
    run.run_id = run_id

    def attributes() -> dict[str, Any]:
        values = resource_attributes(args)
        values.update(_ranks.coordinate_attributes(rank, coordinates, args))
        values["megatron.run_id"] = run_id.hex()
        values["megatron.export_ranks"] = settings.export_ranks.text
        values.update(upstream_labels(settings, rank))
        return values

    if settings.sampler_enabled and not rank_sampled(rank, settings.export_sample_rate):
        settings = dataclasses.replace(settings, traces=False)  # upstream's rank-aware sampler
        run.settings = settings
    if settings.logs_enabled:
        log_once(
            "logs_enabled",
            "%s=1: upstream's bridge of Python logging to OpenTelemetry is not built here",
            ENV["logs_enabled"].name,
        )

    groups = _start(settings, attributes, tracer_provider, meter_provider)
    if run.tracer is not None:
        run.pipeline = _ranks.pipeline(rank, args)
    return groups


def upstream_labels(settings: Settings, rank: int) -> dict[str, str]:
    """Upstream Megatron-LM's run and user labels (PR #6438, through nemo-lens): ``nemo.run.id``
    (MEGATRON_OTEL_RUN_ID, else $SLURM_JOB_ID) with ``service.instance.id`` (the label and the
    rank), and ``nemo.user.id``, each when given. (Without a label upstream makes a random one per
    process; here ``megatron.run_id``, agreed by the ranks, always identifies the run.)"""
    label = settings.run_label or os.environ.get("SLURM_JOB_ID", "").strip()
    values = {"nemo.run.id": label, "service.instance.id": f"{label}-rank{rank}"} if label else {}
    if settings.user_id:
        values["nemo.user.id"] = settings.user_id
    return values


def worker_bootstrap() -> dict[str, Any]:
    """A plain, picklable dict that sets telemetry up in a spawned worker (``setup_worker``)."""
    settings = PROCESS.run.settings
    groups = enabled_groups()
    if settings is None or not groups or not _process.active():
        return {"enabled": False}
    return {
        "enabled": True,
        "span_groups": sorted(groups),
        "exporter": settings.exporter,
        "service_name": settings.service_name,
        "resource": dict(PROCESS.run.resource),
        "export": dataclasses.asdict(settings.export),
        "environ": {k: v for k, v in os.environ.items() if k.startswith("OTEL_")},
    }


class _WorkerEntry:
    """A process target that sets telemetry up from a bootstrap dict, then runs the real target.

    Picklable (a module-level class holding the target and a plain dict), so it crosses ``spawn``.
    """

    def __init__(self, target: Callable[..., Any], bootstrap: dict[str, Any]) -> None:
        self.target = target
        self.bootstrap = bootstrap

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        setup_worker(self.bootstrap)
        return self.target(*args, **kwargs)


def in_worker(target: Callable[..., Any]) -> Callable[..., Any]:
    """``target`` for a worker process (the async checkpoint writer) that sets telemetry up there
    first; ``target`` itself when telemetry is off, so the process starts exactly as before."""
    bootstrap = worker_bootstrap()
    if not bootstrap.get("enabled"):
        return target
    return _WorkerEntry(target, bootstrap)


def setup_worker(bootstrap: Mapping[str, Any]) -> None:
    """Set telemetry up in a worker process from ``worker_bootstrap()``; inert when it was off.

    The worker traces the same groups to the same exporter; it records no metrics. Never raises.
    """
    if not bootstrap or not bootstrap.get("enabled"):
        return
    try:
        for key, value in dict(bootstrap.get("environ") or {}).items():
            os.environ.setdefault(key, value)
        settings = Settings(
            enabled=True,
            span_groups=frozenset(bootstrap["span_groups"]) & frozenset(GROUPS),
            exporter=bootstrap["exporter"],
            traces=True,
            metrics=False,
            export_rank=-1,
            sigterm_flush_timeout=0.0,
            service_name=bootstrap["service_name"],
            export=ExportLimits(**dict(bootstrap.get("export") or {})),
        )
        _process.reset()
        resource = dict(bootstrap.get("resource") or {})
        _start(settings, lambda: resource, None, None)
        import multiprocessing.util

        # A multiprocessing child ends with os._exit: atexit hooks do not run, finalizers do.
        multiprocessing.util.Finalize(None, _process.shutdown, exitpriority=100)
    except Exception:
        log_once("worker", "setting telemetry up in the worker failed", exc_info=True)


def _start(
    settings: Settings,
    attributes: Callable[[], dict[str, Any]],
    tracer_provider: Any,
    meter_provider: Any,
) -> frozenset[str]:
    if not OTEL_INSTALLED:
        log_once("api", "opentelemetry is not installed: Megatron telemetry stays disabled")
        return frozenset()
    run = PROCESS.run
    groups = settings.span_groups if settings.traces else frozenset()
    run.resource = attributes() if groups or settings.metrics else {}
    if tracer_provider is None and not settings.own_providers:
        tracer_provider = _application_provider("trace")
    if meter_provider is None and not settings.own_providers:
        meter_provider = _application_provider("metrics")
    sdk_resource = None
    if (tracer_provider is None and groups) or (meter_provider is None and settings.metrics):
        sdk_resource = _sdk_resource(settings.service_name, run.resource)
    if groups:
        provider, owned = tracer_provider, False
        if provider is None:
            provider, processors = _export.tracer_provider(settings, sdk_resource)
            run.processors.extend(processors)
            owned = True
        else:
            recorder = _borrow(provider, settings)
            if recorder is not None:
                run.processors.append(recorder)
                run.borrowed.append(recorder)  # flushed before the provider, whose processor
                # then exports what the SDK spans of the provider (lifecycle spans) left
        if provider is not None:
            _process.adopt(provider, owned)
        groups = select(groups, tracer_provider=provider)
        _log_recording_path(provider, owned)
        PROCESS.run.ids = _ranks.install_ids(PROCESS.run.tracer)
    if settings.metrics:
        provider, owned = meter_provider, False
        if provider is None:
            provider, owned = _export.meter_provider(settings, sdk_resource), True
        try:
            if provider is None:
                from opentelemetry import metrics

                meter = metrics.get_meter(SCOPE, VERSION, schema_url=SCHEMA_URL)
            else:
                _process.adopt(provider, owned)
                meter = provider.get_meter(SCOPE, VERSION, schema_url=SCHEMA_URL)
            _metrics.create_instruments(meter)
            set_flag("METRICS", True)
        except Exception:
            log_once("instruments", "creating metric instruments failed", exc_info=True)
    if groups or flag("METRICS"):
        run.flush_timeout = settings.export.flush_timeout
        _process.install_exit_hooks(settings.sigterm_flush_timeout)
    return groups


def _borrow(provider: Any, settings: Settings) -> Any:
    """The lean recorder for ``provider``, a tracer provider the program or the distro set, when
    its spans may record lean (``_lean_install.borrowable``: the rule); else None (the SDK path),
    why remembered for ``_log_recording_path``."""
    try:
        found = _lean_install.borrowable(provider, settings.recording)
        if isinstance(found, str):
            PROCESS.run.recording_reason = found
            return None
        exporter, span_limits = found
        return _lean_install.install(
            provider,
            exporter,
            settings.export,
            SPAN_ATTRIBUTES,
            span_limits=span_limits,
            borrowed=True,
        )
    except TypeError as error:  # the exporter cannot be shared (_lean_install.install)
        PROCESS.run.recording_reason = str(error)
        return None
    except Exception:
        log_once(
            "lean-borrow", "recording lean into the global tracer provider failed", exc_info=True
        )
        PROCESS.run.recording_reason = "setting the lean path up failed"
        return None


def _log_recording_path(provider: Any, owned: bool) -> None:
    """Say once per run which path spans record on, and why (INFO; a WARNING when
    MEGATRON_OTEL_RECORDING=lean could not be honoured)."""
    run = PROCESS.run
    lean = type(run.tracer).__name__ == "LeanTracer"
    whose = "the runtime's own" if owned else "the global (or given)"
    where = f"{whose} tracer provider ({type(provider).__name__})"
    if lean:
        LOG.info("telemetry: spans record on the lean path, through %s", where)
        return
    reason = run.recording_reason or "the provider has no exporter or another sampler"
    level = logging.WARNING if run.settings and run.settings.recording == "lean" else logging.INFO
    LOG.log(level, "telemetry: spans record on the SDK path, through %s: %s", where, reason)


def _application_provider(signal: str) -> Any:
    """The global provider of ``signal`` when the application has set one (NeMo, a user's own SDK
    setup): the runtime then records into it (flushed, never shut down). None when unset."""
    try:
        if signal == "trace":
            from opentelemetry import trace

            provider: Any = trace.get_tracer_provider()
            unset: tuple[type, ...] = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        else:
            from opentelemetry import metrics

            provider = metrics.get_meter_provider()
            # The API's own classes are placeholders (its proxy and no-op providers): any
            # other provider is one the application set.
            if type(provider).__module__.split(".")[:2] == ["opentelemetry", "metrics"]:
                return None
            unset = (metrics.NoOpMeterProvider,)
        return None if isinstance(provider, unset) else provider
    except Exception:
        log_once(f"global-{signal}", "reading the global %s provider failed", signal, exc_info=True)
        return None


def _sdk_resource(service_name: str, attributes: dict[str, Any]) -> Any:
    try:
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        return None
    return Resource.create({**attributes, "service.name": service_name})
