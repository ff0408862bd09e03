"""The fixed vocabulary of the spec format, in one place.

Everything a spec can name that the generator or the rendered runtime gives a meaning to: metric
kinds, lifecycle roles, configuration-variable roles, exporters, and the names a group cannot take
because the runtime already uses them. The spec readers validate against these before anything is
rendered; the emitters import them and never re-check.
"""

from __future__ import annotations

METRIC_KINDS = ("histogram", "gauge", "counter")

# Weaver's attribute types (semconv registry format v1), the ones a span attribute can hold.
ATTRIBUTE_TYPES = ("string", "int", "double", "boolean", "string[]", "int[]", "double[]", "boolean[]")

# `lifecycle:` keys in telemetry.yaml -> the role a LifecycleSpan carries.
LIFECYCLE_KEYS = {
    "startup": "startup",
    "pre_startup": "pre_startup",
    "phases": "phase",
    "interval": "interval",
}
LIFECYCLE_ROLES = ("startup", "phase", "pre_startup", "interval")

EXPORTERS = ("otlp", "console", "none")

# What the runtime does with a configuration variable is fixed by its role; the spec gives its
# name, default and valid values. role -> (name and default when the spec does not declare one).
DEFAULT_PRESET = "default"
ENV_ROLES: dict[str, tuple[str, str]] = {
    "enabled": ("MEGATRON_OTEL_ENABLED", "0"),
    "span_groups": ("MEGATRON_OTEL_SPAN_GROUPS", DEFAULT_PRESET),
    "exporter": ("MEGATRON_OTEL_EXPORTER", "otlp"),
    "traces_enabled": ("MEGATRON_OTEL_TRACES_ENABLED", "1"),
    "metrics_enabled": ("MEGATRON_OTEL_METRICS_ENABLED", "1"),
    "export_rank": ("MEGATRON_OTEL_EXPORT_RANK", "-1"),
    "export_ranks": ("MEGATRON_OTEL_EXPORT_RANKS", "last"),
    "sigterm_flush_timeout": ("MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S", "0"),
    "service_name": ("OTEL_SERVICE_NAME", "megatron-lm"),
    # Export limits: one export's timeout (retries included), flush + shutdown at the end of the
    # run, the batch span processor's queue and batches, the metric reader's interval.
    "export_timeout": ("MEGATRON_OTEL_EXPORT_TIMEOUT_S", "10"),
    "flush_timeout": ("MEGATRON_OTEL_FLUSH_TIMEOUT_S", "5"),
    "span_queue_size": ("OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
    "span_batch_size": ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
    "span_schedule_delay": ("OTEL_BSP_SCHEDULE_DELAY", "5000"),
    "metric_export_interval": ("OTEL_METRIC_EXPORT_INTERVAL", "60000"),
    "own_providers": ("MEGATRON_OTEL_OWN_PROVIDERS", "0"),
    "recording": ("MEGATRON_OTEL_RECORDING", "auto"),
    # Upstream Megatron-LM's variables (PR #6438, read through nemo-lens): which ranks export, a
    # run and user label, the log bridge (accepted, not built) and the rank-aware sampler.
    "export_strategy": ("MEGATRON_OTEL_EXPORT_STRATEGY", "single_rank"),
    "export_sample_rate": ("MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "1.0"),
    "sampler_enabled": ("MEGATRON_OTEL_SAMPLER_ENABLED", "0"),
    "logs_enabled": ("MEGATRON_OTEL_LOGS_ENABLED", "0"),
    "run_id": ("MEGATRON_OTEL_RUN_ID", ""),
    "user_id": ("MEGATRON_OTEL_USER_ID", ""),
}
ROLE_BY_NAME = {name: role for role, (name, _) in ENV_ROLES.items()}

# The constants of the runtime's generated taxonomy module (_taxonomy.py), in file order.
TAXONOMY_CONSTANTS = (
    "CHOICES",
    "FLAGS",
    "GROUPS",
    "PRESETS",
    "DEFAULT_SPEC",
    "SPANS",
    "ENV",
    "ENV_TIMESTAMPS",
    "FLAG_OVERRIDES",
    "STARTUP",
    "INTERVAL",
    "PHASES",
    "PRE_STARTUP",
    "INSTRUMENTS",
)
# Upper-case module globals of the runtime that a group's flag (its name upper-cased) must not
# shadow. ``METRICS`` is also the guard name of metric hooks.
RESERVED_FLAGS = frozenset({*TAXONOMY_CONSTANTS, "FORMAT", "METRICS", "TYPE_CHECKING"})
RESERVED_GROUP_NAMES = frozenset(flag.lower() for flag in RESERVED_FLAGS)


def env_role(name: str, role: str | None) -> str | None:
    """The runtime role of a configuration variable: its ``role``, else the one its name implies."""
    return role or ROLE_BY_NAME.get(name)
