"""Upstream Megatron-LM's (#6438) configuration variables, read with the same values and meaning:
the nemo-lens ones (export strategy and sample rate, rank-aware sampler, run and user labels,
the log bridge switch), the NEMO_LENS_* fallback, and its boolean spellings."""

from __future__ import annotations

import hashlib
from types import ModuleType

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider


@pytest.fixture
def provider() -> TracerProvider:
    return TracerProvider(shutdown_on_exit=False)


def _sampled(rank: int, rate: float) -> bool:
    """nemo-lens's rank sampling, written out: a hash of the rank's number below the rate."""
    return (int(hashlib.md5(str(rank).encode()).hexdigest(), 16) % 10000) / 10000.0 < rate


@pytest.mark.parametrize("spelling", ["yes", "on", "TRUE", "1"])
def test_every_boolean_spelling_of_nemo_lens_turns_telemetry_on(
    otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", spelling)
    assert otel.configure(tracer_provider=provider) != frozenset()


def test_nemo_lens_variables_apply_when_megatron_ones_are_unset(
    otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEMO_LENS_ENABLED", "1")
    monkeypatch.setenv("NEMO_LENS_SPAN_GROUPS", "layer")
    assert otel.configure(tracer_provider=provider) == {"layer"}
    monkeypatch.setenv("MEGATRON_OTEL_SPAN_GROUPS", "job")  # the Megatron name wins
    assert otel.configure(tracer_provider=provider) == {"job"}
    monkeypatch.setenv("NEMO_LENS_EXPORT_RANK", "-7")
    with pytest.raises(ValueError, match="NEMO_LENS_EXPORT_RANK='-7'"):
        otel.configure(tracer_provider=provider)


@pytest.mark.parametrize(
    ("env", "world", "exporting"),
    [
        ({"MEGATRON_OTEL_EXPORT_STRATEGY": "single_rank"}, 4, [3]),
        ({"MEGATRON_OTEL_EXPORT_STRATEGY": "single_rank", "MEGATRON_OTEL_EXPORT_RANK": "1"}, 4, [1]),
        ({"MEGATRON_OTEL_EXPORT_STRATEGY": "all_ranks"}, 4, [0, 1, 2, 3]),
        (
            {"MEGATRON_OTEL_EXPORT_STRATEGY": "sampled", "MEGATRON_OTEL_EXPORT_SAMPLE_RATE": "0.5"},
            16,
            [r for r in range(16) if _sampled(r, 0.5)],
        ),
        ({"MEGATRON_OTEL_EXPORT_STRATEGY": "sampled", "MEGATRON_OTEL_EXPORT_SAMPLE_RATE": "0"}, 4, []),
    ],
)
def test_export_strategies_pick_the_ranks_nemo_lens_picks(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], world: int, exporting: list[int]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = otel._config.read_settings()
    picked = [rank for rank in range(world) if settings.export_ranks.selects(rank, world, {})]
    assert picked == exporting
    assert 0 < len([r for r in range(16) if _sampled(r, 0.5)]) < 16  # the case above picks some


def test_first_rank_per_node_reads_the_local_rank(otel: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_EXPORT_STRATEGY", "First_Rank_Per_Node")
    settings = otel._config.read_settings()
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert settings.export_ranks.selects(8, 16, {})
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert not settings.export_ranks.selects(3, 16, {})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEGATRON_OTEL_EXPORT_STRATEGY": "random"}, "single_rank, all_ranks, sampled, first_rank_per_node"),
        ({"MEGATRON_OTEL_EXPORT_SAMPLE_RATE": "1.5"}, "MEGATRON_OTEL_EXPORT_SAMPLE_RATE='1.5'"),
        (
            {"MEGATRON_OTEL_EXPORT_STRATEGY": "all_ranks", "MEGATRON_OTEL_EXPORT_RANKS": "0,1"},
            "are both given",
        ),
    ],
)
def test_invalid_upstream_values_name_the_variable(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        otel.configure()


def test_the_rank_aware_sampler_drops_the_spans_of_unsampled_ranks_not_their_metrics(
    otel: ModuleType, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    unsampled = next(r for r in range(64) if not _sampled(r, 0.25))
    sampled = next(r for r in range(64) if _sampled(r, 0.25))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
    for name, value in {
        "MEGATRON_OTEL_ENABLED": "1",
        "MEGATRON_OTEL_EXPORT_STRATEGY": "all_ranks",
        "MEGATRON_OTEL_SAMPLER_ENABLED": "1",
        "MEGATRON_OTEL_EXPORT_SAMPLE_RATE": "0.25",
        "WORLD_SIZE": "64",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(otel._ranks, "agree_run_id", lambda world: b"\x01" * 16)
    monkeypatch.setenv("RANK", str(unsampled))
    assert otel.configure(tracer_provider=provider, meter_provider=meters) == frozenset()
    assert otel.METRICS is True
    monkeypatch.setenv("RANK", str(sampled))
    assert otel.configure(tracer_provider=provider, meter_provider=meters) != frozenset()


def test_run_and_user_labels_are_resource_attributes(
    otel: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", "1")
    monkeypatch.setenv("MEGATRON_OTEL_EXPORTER", "none")
    monkeypatch.setenv("MEGATRON_OTEL_RUN_ID", "run-7")
    monkeypatch.setenv("NEMO_LENS_USER_ID", "alice")
    otel.configure()
    attributes = otel._state.PROCESS.run.owned[0].resource.attributes
    assert attributes["nemo.run.id"] == "run-7"
    assert attributes["service.instance.id"] == "run-7-rank0"
    assert attributes["nemo.user.id"] == "alice"
    monkeypatch.delenv("MEGATRON_OTEL_RUN_ID")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    otel.configure()
    assert otel._state.PROCESS.run.owned[0].resource.attributes["nemo.run.id"] == "4242"


def test_the_log_bridge_switch_is_accepted_and_says_it_is_not_built(
    otel: ModuleType,
    provider: TracerProvider,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MEGATRON_OTEL_ENABLED", "1")
    monkeypatch.setenv("MEGATRON_OTEL_LOGS_ENABLED", "on")
    assert otel.configure(tracer_provider=provider) != frozenset()
    assert "MEGATRON_OTEL_LOGS_ENABLED=1" in caplog.text
