"""The Megatron worker set-ups: the environment a worker subprocess runs in, and ``otlp_worker.py``
driven over its protocol pipe (tests/megatron_cpu/test_otlp_export.py, test_lean_capture.py).

Nothing here imports torch or the OpenTelemetry SDK: the workers do, in their own processes.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.paths import REPO

if TYPE_CHECKING:
    from tests.megatron_cpu.otlp_receiver import OtlpReceiver

OTLP_WORKER = REPO / "tests" / "megatron_cpu" / "otlp_worker.py"
SERVICE = "megatron-otlp-test"
JOB = {"SLURM_JOB_ID": "4242", "SLURM_CLUSTER_NAME": "ci", "SLURM_PROCID": "0", "LOCAL_RANK": "0"}


def worker_env(root: Path) -> dict[str, str]:
    """The environment of a Megatron worker importing ``megatron`` from ``root``: no telemetry
    variables of the machine, no rank of its own, one thread, warnings off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    env["PYTHONPATH"] = str(root)
    env["MASTER_ADDR"] = "127.0.0.1"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    return env


def communicate_all(procs: list[subprocess.Popen], timeout: float) -> list[tuple[str, bool]]:
    """Each worker's output once it exited, in order, and whether it ran past ``timeout`` (then
    every worker is killed)."""
    outputs = []
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=timeout)
            outputs.append((output, False))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            output, _ = proc.communicate()
            outputs.append((output, True))
    return outputs


def otel_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    env = {
        "MEGATRON_OTEL_ENABLED": "1",
        "MEGATRON_OTEL_EXPORTER": "otlp",
        "MEGATRON_OTEL_SPAN_GROUPS": "all",
        "OTEL_SERVICE_NAME": SERVICE,
        **JOB,
        **receiver.environ(),
    }
    env.update(extra)
    return env


def distro_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    """``otel_env`` for a worker under ``opentelemetry-instrument``: the distro builds the global
    providers from the standard variables (OTLP spans and metrics, no logs); its exporters' timeout
    is the standard OTEL_EXPORTER_OTLP_TIMEOUT (MEGATRON_OTEL_EXPORT_TIMEOUT_S is the runtime's
    own exporters')."""
    settings = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "none",
    }
    return otel_env(receiver, **{**settings, **extra})


class Worker:
    """``otlp_worker.py`` in a subprocess. Its protocol lines (``END <time>``, ``PHASE ...``) come on
    a pipe of their own, each stamped when it was read; its stdout and stderr (logs, which other
    threads write at any time) are kept apart from them, for the assertions on logs and for
    failure messages."""

    def __init__(
        self, fork_root: Path, args: list[str], env: dict[str, str], cwd: Path, instrument: bool = False
    ) -> None:
        environ = worker_env(fork_root)
        environ.update(env)
        self.out = cwd / f"worker-{time.monotonic_ns()}.json"
        # under opentelemetry-instrument (installed beside this Python): the distro's providers
        launcher = [str(Path(sys.executable).parent / "opentelemetry-instrument")] if instrument else []
        protocol_read, protocol_write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [*launcher, sys.executable, str(OTLP_WORKER), *args, "--out", str(self.out)]
                + ["--protocol-fd", str(protocol_write)],
                cwd=cwd,
                env=environ,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                pass_fds=(protocol_write,),
            )
        finally:
            os.close(protocol_write)  # the worker holds the only write end: EOF when it exits
        self.lines: list[tuple[float, str]] = []  # stdout and stderr
        self.protocol: list[tuple[float, str]] = []
        self._queue: queue.Queue[tuple[float, str] | None] = queue.Queue()
        protocol = open(protocol_read, encoding="ascii")  # noqa: SIM115 (closed by its reader)
        self._readers = [
            threading.Thread(target=self._read_output, daemon=True),
            threading.Thread(target=self._read_protocol, args=(protocol,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        self.ended_at: float | None = None

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def _read_protocol(self, protocol: Any) -> None:
        with protocol:
            for line in protocol:
                entry = (time.time(), line.rstrip("\n"))
                self.protocol.append(entry)
                self._queue.put(entry)
        self._queue.put(None)

    def expect(self, prefix: str, timeout: float = 240) -> tuple[float, str]:
        """Wait for the next protocol line starting with ``prefix``; fail with the output so far if
        none."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                entry = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                entry = None
            if entry is None:
                self.kill()
                pytest.fail(f"worker never said {prefix!r}:\n{self.output()[-4000:]}")
            if entry[1].startswith(prefix):
                return entry

    def send(self, line: str = "go") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout: float = 240) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"worker did not exit within {timeout}s:\n{self.output()[-4000:]}")
        self.ended_at = time.time()
        for reader in self._readers:
            reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def output(self) -> str:
        """stdout and stderr, then the protocol lines."""
        said = [f"[protocol] {line}" for _, line in self.protocol]
        return "\n".join([line for _, line in self.lines] + said)

    def results(self) -> dict[str, Any]:
        return json.loads(self.out.read_text())


# megatron/training uses typing.override (Python 3.12): 3.11 is given the identity decorator first
FLAGS_SCRIPT = """\
import json, sys, typing
typing.override = getattr(typing, "override", lambda f: f)
from megatron.training.arguments import parse_args
from megatron.core import otel

sys.argv = ["pretrain"] + json.loads(sys.argv[1])
args = parse_args()
groups = otel.configure(args)
print(json.dumps({
    "enabled": args.otel_enabled,
    "span_groups": args.otel_span_groups,
    "service_name": args.otel_service_name,
    "groups": sorted(groups),
}))
"""


def parse_flags(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Megatron's ``parse_args`` on ``argv``, then ``otel.configure`` on its result, in a subprocess
    with ``env``: the otel flags' values and the groups enabled."""
    command = [sys.executable, "-c", FLAGS_SCRIPT, json.dumps(argv)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
