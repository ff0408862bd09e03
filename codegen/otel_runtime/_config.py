"""Configuration: environment variables, overridden by command-line flags; the exporting rank.

Invalid values fail fast with a ``ValueError`` naming the variable (or flag) and the valid values;
every rank reads the same environment and flags, so every rank fails the same way.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._rankspec import ExportRanks, export_ranks_from, parse_export_ranks
from ._registry import current_registry
from ._state import log_once
from ._taxonomy import ENV, ENV_TIMESTAMPS, FLAG_OVERRIDES


def resolve(spec: str) -> frozenset[str]:
    """Groups named by ``spec``: comma-separated presets and/or groups, case-insensitive.

    ``"*"`` means every group, ``""`` none; an unknown name raises ``ValueError``.
    """
    groups, presets = current_registry()  # the tree's own registry, read now (_registry)
    preset_keys = {name.lower(): name for name in presets}
    group_keys = {name.lower(): name for name in groups}
    selected: set[str] = set()
    for entry in spec.split(","):
        key = entry.strip().lower()
        if not key:
            continue
        if key == "*":
            selected.update(groups)
        elif key in preset_keys:
            selected.update(presets[preset_keys[key]])
        elif key in group_keys:
            selected.add(group_keys[key])
        else:
            raise ValueError(
                f"unknown span group or preset {entry.strip()!r} in {spec!r}; "
                f"valid presets: {', '.join(presets) or '(none)'}; "
                f"valid groups: {', '.join(groups) or '(none)'}"
            )
    return frozenset(selected)


_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True}
_BOOLEANS.update({"0": False, "false": False, "no": False, "off": False})
# Upstream Megatron-LM (PR #6438) reads its variables through nemo-lens, each MEGATRON_OTEL_X
# falling back to NEMO_LENS_X when unset: the same fallback here.
FALLBACK_PREFIXES = {"MEGATRON_OTEL_": "NEMO_LENS_"}
# Upstream's export strategies (MEGATRON_OTEL_EXPORT_STRATEGY), the default first.
STRATEGIES = ("single_rank", "all_ranks", "sampled", "first_rank_per_node")


@dataclass(frozen=True)
class ExportLimits:
    """How long exporting may take and how much may wait for it (see ``_export``)."""

    export_timeout: float = 10.0  # seconds for one export, the exporter's retries included
    export_timeout_given: bool = False  # set explicitly: wins over OTEL_EXPORTER_OTLP_*TIMEOUT
    flush_timeout: float = 5.0  # seconds for flush and shutdown at the end of the run, in all
    span_queue_size: int = 2048  # ended spans waiting for export, at most
    span_batch_size: int = 512  # spans per export, at most
    span_schedule_delay_ms: float = 5000.0  # the longest a span waits for its batch
    metric_export_interval_ms: float = 60000.0


@dataclass(frozen=True)
class Settings:
    """One run's configuration, validated."""

    enabled: bool
    span_groups: frozenset[str]
    exporter: str  # the spans' exporter: otlp, console or none
    traces: bool
    metrics: bool
    export_rank: int  # -1: the last rank
    sigterm_flush_timeout: float  # seconds; 0: no flush on SIGTERM
    service_name: str
    export: ExportLimits = field(default_factory=ExportLimits)
    own_providers: bool = False  # build our providers even when the application set global ones
    recording: str = (
        "auto"  # auto, lean or sdk: which recording path spans take (see _lean_install)
    )
    export_ranks: ExportRanks = field(default_factory=ExportRanks)  # which ranks export
    metrics_exporter: str = ""  # the metrics' exporter; empty: the spans'
    # Upstream's (PR #6438) labels and switches, accepted with the same meaning.
    run_label: str = ""  # nemo.run.id; empty: $SLURM_JOB_ID, else the agreed run id
    user_id: str = ""  # nemo.user.id; empty: none
    sampler_enabled: bool = False  # spans only on the ranks rank_sampled() picks
    export_sample_rate: float = 1.0
    logs_enabled: bool = False  # accepted, not built (logged once)

    def exporter_for(self, signal: str) -> str:
        """The exporter of ``signal`` ("trace" or "metric")."""
        return self.exporter if signal == "trace" else (self.metrics_exporter or self.exporter)

    def exporting_rank(self, world_size: int) -> int:
        """The rank that records and exports in a world of ``world_size``; ``ValueError`` when
        the configured rank is not in it."""
        rank = world_size - 1 if self.export_rank == -1 else self.export_rank
        if rank >= world_size:
            name = ENV["export_rank"].name
            raise ValueError(
                f"{name}={self.export_rank}: no such rank in a world of {world_size}; "
                f"valid values: -1 (the last rank) or 0..{world_size - 1}"
            )
        return rank


def read_settings(args: Any = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``environ`` (default ``os.environ``), flags in ``args`` taking precedence."""
    environ = os.environ if environ is None else environ
    raw: dict[str, tuple[str, str]] = {}  # role -> (value, where it came from)
    for role, (name, default, _) in ENV.items():
        value, where = environ.get(name, "").strip(), name
        for prefix, fallback in FALLBACK_PREFIXES.items():
            if not value and name.startswith(prefix):
                where = fallback + name[len(prefix) :]
                value = environ.get(where, "").strip()
                where = where if value else name
        raw[role] = (value, where) if value else (default, name)
    roles = {name: role for role, (name, _, _) in ENV.items()}
    for dest, name, option, switch in FLAG_OVERRIDES:
        given = getattr(args, dest, None) if args is not None else None
        if switch:
            if given is True:
                raw[roles[name]] = ("1", option)
        elif given is not None and str(given).strip():
            raw[roles[name]] = (str(given).strip(), option)
    spec, where = raw["span_groups"]
    try:
        groups = resolve(spec)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    traces_exporter, metrics_exporter = _exporters(raw, environ)
    return Settings(
        enabled=_boolean(raw, "enabled"),
        span_groups=groups,
        exporter=traces_exporter,
        metrics_exporter=metrics_exporter,
        traces=_boolean(raw, "traces_enabled"),
        metrics=_boolean(raw, "metrics_enabled"),
        export_rank=_export_rank(*raw["export_rank"]),
        sigterm_flush_timeout=_seconds(*raw["sigterm_flush_timeout"]),
        service_name=raw["service_name"][0],
        export=_export_limits(raw, environ),
        own_providers=_boolean(raw, "own_providers"),
        recording=_choice(raw, "recording", RECORDING_PATHS),
        export_ranks=_export_ranks(raw),
        run_label=raw["run_id"][0],
        user_id=raw["user_id"][0],
        sampler_enabled=_boolean(raw, "sampler_enabled"),
        export_sample_rate=_sample_rate(raw),
        logs_enabled=_boolean(raw, "logs_enabled"),
    )


@dataclass(frozen=True)
class UpstreamStrategy(ExportRanks):
    """Upstream Megatron-LM's export strategies that ``MEGATRON_OTEL_EXPORT_RANKS`` has no form for:
    ``sampled`` (a rank exports when a hash of its number falls below ``rate``, the same ranks on
    every run) and ``first_rank_per_node`` (``LOCAL_RANK`` 0)."""

    rate: float = 1.0

    def many(self) -> bool:
        return True

    def selects(self, rank: int, world: int, coordinates: Mapping[str, int]) -> bool:
        if self.kind == "sampled":
            return rank_sampled(rank, self.rate)
        return _int_env("LOCAL_RANK", 0) == 0


def rank_sampled(rank: int, rate: float) -> bool:
    """Whether upstream's rank sampling picks ``rank`` at ``rate``: a hash of the rank's number
    below the rate, so the same ranks on every run (the exporting strategy ``sampled`` and the
    rank-aware span sampler, MEGATRON_OTEL_SAMPLER_ENABLED)."""
    digest = hashlib.md5(str(rank).encode(), usedforsecurity=False).hexdigest()
    return (int(digest, 16) % 10000) / 10000.0 < rate


def _sample_rate(raw: Mapping[str, tuple[str, str]]) -> float:
    value, where = raw["export_sample_rate"]
    rate = _number(value, where, 0, False, "a fraction from 0.0 to 1.0")
    if rate > 1.0:
        raise ValueError(
            f"{where}={value!r} is not valid; valid values: a fraction from 0.0 to 1.0"
        )
    return rate


def _export_ranks(raw: Mapping[str, tuple[str, str]]) -> ExportRanks:
    """The exporting ranks: upstream's MEGATRON_OTEL_EXPORT_STRATEGY (single_rank reads
    MEGATRON_OTEL_EXPORT_RANK), or MEGATRON_OTEL_EXPORT_RANKS; not both."""
    value, where = raw["export_strategy"]
    strategy = value.strip().lower()
    if strategy not in STRATEGIES:
        raise ValueError(f"{where}={value!r} is not valid; valid values: {', '.join(STRATEGIES)}")
    ranks, ranks_where = raw["export_ranks"]
    if strategy != STRATEGIES[0] and ranks.strip() != ENV["export_ranks"].default:
        raise ValueError(
            f"{where}={value!r} and {ranks_where}={ranks!r} are both given; valid: one of them"
        )
    rate = _sample_rate(raw)
    if strategy == "all_ranks":
        return parse_export_ranks("all", where)
    if strategy in ("sampled", "first_rank_per_node"):
        return UpstreamStrategy(strategy, where=where, text=value, rate=rate)
    return export_ranks_from(
        raw["export_ranks"], ENV["export_ranks"][1], raw["export_rank"], ENV["export_rank"][1]
    )


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size: torch.distributed when initialized, else the
    RANK / WORLD_SIZE environment (0 and 1 when unset). Never a collective."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank()), int(dist.get_world_size())
        except Exception:
            pass
    return _int_env("RANK", 0), max(1, _int_env("WORLD_SIZE", 1))


def env_timestamps(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    """Startup timestamps given by the environment; unparsable values are logged and skipped."""
    environ = os.environ if environ is None else environ
    out: dict[str, float] = {}
    for name, key in ENV_TIMESTAMPS.items():
        value = environ.get(name, "").strip()
        if not value:
            continue
        try:
            out[key] = float(value)
        except ValueError:
            log_once(name, "%s=%r is not a time in epoch seconds; ignored", name, value)
    return out


def _boolean(raw: Mapping[str, tuple[str, str]], role: str) -> bool:
    value, where = raw[role]
    choices = ENV[role].choices
    key = value.lower()
    if key in _BOOLEANS and (not choices or key in (c.lower() for c in choices)):
        return _BOOLEANS[key]
    raise ValueError(
        f"{where}={value!r} is not valid; valid values: {', '.join(choices or _BOOLEANS)}"
    )


# MEGATRON_OTEL_RECORDING's values, when the specs declare none (see _lean_install.borrowable).
RECORDING_PATHS = ("auto", "lean", "sdk")


def _choice(raw: Mapping[str, tuple[str, str]], role: str, default: tuple[str, ...] = ()) -> str:
    value, where = raw[role]
    choices = ENV[role].choices or default
    for choice in choices:
        if value.lower() == choice.lower():
            return choice
    raise ValueError(f"{where}={value!r} is not valid; valid values: {', '.join(choices)}")


# The standard variables of the OpenTelemetry SDK that choose each signal's exporter.
STANDARD_EXPORTERS = {"trace": "OTEL_TRACES_EXPORTER", "metric": "OTEL_METRICS_EXPORTER"}


def _exporters(raw: Mapping[str, tuple[str, str]], environ: Mapping[str, str]) -> tuple[str, str]:
    """The spans' and the metrics' exporters. MEGATRON_OTEL_EXPORTER (or its flag), when given,
    chooses both (the runtime's own alias, kept for existing jobs); else the standard
    OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER choose each (otlp when unset). Of a standard
    list (``otlp,console``) the first the runtime builds is used; one it cannot build (another
    SDK exporter) exports nothing, logged once."""
    where = raw["exporter"][1]
    name = ENV["exporter"][0]
    if where != name or environ.get(name, "").strip():
        chosen = _choice(raw, "exporter")
        return chosen, chosen
    choices = ENV["exporter"][2]
    found = []
    for signal, variable in STANDARD_EXPORTERS.items():
        names = [n.strip().lower() for n in environ.get(variable, "").split(",") if n.strip()] or [
            "otlp"
        ]
        usable = [n for n in names if n in choices]
        if not usable:
            log_once(
                variable,
                "%s=%s: the runtime's own providers build only %s; %ss are not exported",
                variable,
                environ.get(variable),
                ", ".join(choices),
                signal,
            )
        found.append(usable[0] if usable else "none")
    return found[0], found[1]


def _export_rank(value: str, where: str) -> int:
    try:
        rank = int(value)
    except ValueError:
        rank = -2
    if rank < -1:
        raise ValueError(
            f"{where}={value!r} is not valid; valid values: -1 (the last rank) or a rank >= 0"
        )
    return rank


def _export_limits(raw: Mapping[str, tuple[str, str]], environ: Mapping[str, str]) -> ExportLimits:
    queue, batch = _count(*raw["span_queue_size"]), _count(*raw["span_batch_size"])
    if batch > queue:
        raise ValueError(
            f"{raw['span_batch_size'][1]}={batch} is not valid; valid values: "
            f"at most {raw['span_queue_size'][1]}={queue}"
        )
    timeout = _seconds(*raw["export_timeout"])
    if timeout <= 0:
        raise ValueError(
            f"{raw['export_timeout'][1]}={raw['export_timeout'][0]!r} is not valid; "
            "valid values: seconds > 0"
        )
    return ExportLimits(
        export_timeout=timeout,
        export_timeout_given=bool(environ.get(ENV["export_timeout"].name, "").strip()),
        flush_timeout=_seconds(*raw["flush_timeout"]),
        span_queue_size=queue,
        span_batch_size=batch,
        span_schedule_delay_ms=_milliseconds(*raw["span_schedule_delay"]),
        metric_export_interval_ms=_milliseconds(*raw["metric_export_interval"]),
    )


def _number(value: str, where: str, low: float, strict: bool, valid: str) -> float:
    """``value`` as a finite number above ``low`` (or equal to it unless ``strict``)."""
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not ((number > low) if strict else (number >= low)) or number == float("inf"):
        raise ValueError(f"{where}={value!r} is not valid; valid values: {valid}")
    return number


def _count(value: str, where: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"{where}={value!r} is not valid; valid values: an integer > 0")
    return number


def _milliseconds(value: str, where: str) -> float:
    return _number(value, where, 0, True, "milliseconds > 0")


def _seconds(value: str, where: str) -> float:
    return _number(value, where, 0, False, "seconds >= 0")


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default
