"""The recording paths over the wire: the same CPU run on the lean path, on the SDK path of the
runtime's own providers, through a TracerProvider the program sets (a batch processor over the
OTLP/HTTP exporter: the lean path), and under ``opentelemetry-instrument`` (the distro's providers
from the ``OTEL_*`` variables) on the lean path and, with ``MEGATRON_OTEL_RECORDING=sdk``, on the
SDK path, to a live OTLP receiver.

``otlp_worker.py train --recording lean|sdk|program|distro``: the tiny GPT's evaluate and train
steps, configured as a job configures them. Each capture passes ``codegen verify`` with the same
report (0 findings), and the lean and SDK captures of each provider hold the same spans field by
field (names, parents, attributes, status, events, links, kind, scope, resource), ids and times
aside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

for _module in (
    "torch",
    "opentelemetry.sdk.trace",
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
):
    pytest.importorskip(_module, reason=f"{_module} is needed for the OTLP capture tests")

from codegen.capture import read_spans
from codegen.cli import main
from tests.megatron_cpu.otlp_receiver import OtlpReceiver
from tests.support.megatron_workers import Worker, distro_env, otel_env
from tests.support.paths import SPECS
from tests.support.ports import free_port

pytest.importorskip("opentelemetry.distro", reason="opentelemetry-distro is needed (tox -e runtime)")

RECORDINGS = ("lean", "sdk", "program", "distro", "distro_sdk")
TRACERS = {
    "lean": "LeanTracer",
    "sdk": "Tracer",
    "program": "LeanTracer",
    "distro": "LeanTracer",
    "distro_sdk": "Tracer",
}
# Resource attributes that name the process itself or the run (megatron.run_id: random per run,
# shared by its ranks); they differ between two runs
PER_PROCESS = (
    "process.pid",
    "process.command_args",
    "process.runtime.version",
    "service.instance.id",
    "megatron.run_id",
)


@pytest.fixture(scope="module")
def captures(fork_root: Path, tmp_path_factory) -> dict[str, dict[str, Any]]:
    out = {}
    for recording in RECORDINGS:
        work = tmp_path_factory.mktemp(f"capture-{recording}")
        with OtlpReceiver("http") as receiver:
            args = [
                "train",
                "--port",
                str(free_port()),
                "--steps",
                "3",
                "--evaluate",
                "--recording",
                recording.removesuffix("_sdk"),
            ]
            distro = recording.startswith("distro")
            env = distro_env(receiver) if distro else otel_env(receiver)
            if recording == "distro_sdk":
                env["MEGATRON_OTEL_RECORDING"] = "sdk"
            worker = Worker(fork_root, args, env, work, instrument=distro)
            code = worker.wait()
            assert code == 0, worker.output()[-4000:]
            out[recording] = {
                "traces": receiver.write_traces(work / "traces.json"),
                "results": worker.results(),
            }
    return out


def normalized(path: Path) -> list[dict[str, Any]]:
    """Each span as a backend receives it, in start order, ids replaced by span positions."""
    spans = sorted(read_spans(path), key=lambda s: (s.start_ns, s.name))
    index = {s.span_id: i for i, s in enumerate(spans)}
    traces: dict[str, int] = {}
    out = []
    for s in spans:
        out.append(
            {
                "name": s.name,
                "trace": traces.setdefault(s.trace_id, len(traces)),
                "parent": None if s.parent_id is None else index.get(s.parent_id, "outside"),
                "attributes": s.attributes,
                "status": (s.status, s.status_message),
                "events": [(e.name, e.attributes) for e in s.events],
                "links": [(index.get(link.span_id), link.attributes) for link in s.links],
                "kind": s.kind,
                "scope": s.scope,
                "resource": {k: v for k, v in s.resource.items() if k not in PER_PROCESS},
            }
        )
    return out


@pytest.mark.parametrize("recording", RECORDINGS)
def test_each_recording_path_passes_codegen_verify(captures, recording, capsys) -> None:
    capture = captures[recording]
    assert capture["results"]["tracer"] == TRACERS[recording]
    path = str(capture["traces"])
    assert main(["verify", str(SPECS), path, "--groups", ""]) == 0, capsys.readouterr().out
    groups = "evaluate,forward_backward,optimizer,microbatch"
    assert main(["verify", str(SPECS), path, "--groups", groups]) == 0, capsys.readouterr().out
    assert ": 0 findings" in capsys.readouterr().out


def test_verify_reports_the_same_on_every_path(captures, capsys) -> None:
    reports = {}
    for recording in RECORDINGS:
        capsys.readouterr()
        main(["verify", str(SPECS), str(captures[recording]["traces"]), "--groups", ""])
        # the report names the capture file; the rest must be identical
        reports[recording] = capsys.readouterr().out.replace(str(captures[recording]["traces"]), "CAPTURE")
    assert len(set(reports.values())) == 1, reports


def test_the_lean_capture_equals_the_sdk_capture_field_by_field(captures) -> None:
    lean, sdk = (normalized(captures[r]["traces"]) for r in ("lean", "sdk"))
    assert len(lean) == len(sdk) > 30
    for lean_span, sdk_span in zip(lean, sdk):
        assert lean_span == sdk_span
    assert captures["lean"]["results"]["losses"] == captures["sdk"]["results"]["losses"]


def test_the_distro_lean_capture_equals_its_sdk_capture_field_by_field(captures) -> None:
    """Under opentelemetry-instrument: what the lean path sent through the distro's provider (its
    exporter, resource and limits) is what the SDK path of that provider sends."""
    lean, sdk = (normalized(captures[r]["traces"]) for r in ("distro", "distro_sdk"))
    assert len(lean) == len(sdk) > 30
    for lean_span, sdk_span in zip(lean, sdk):
        assert lean_span == sdk_span
    # the distro's resource (OTEL_SERVICE_NAME and the SDK's own), not the runtime's
    resource = lean[0]["resource"]
    assert resource["service.name"] == "megatron-otlp-test" and "telemetry.sdk.version" in resource
    assert "megatron.num_layers" not in resource
    assert captures["distro"]["results"]["losses"] == captures["distro_sdk"]["results"]["losses"]
