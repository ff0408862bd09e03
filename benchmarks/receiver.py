"""The tests' live OTLP receiver (``tests/megatron_cpu/otlp_receiver.py``), run in a child process
so that the CPU it spends decoding what arrives is not counted as the measured process's.

    with ReceiverProcess() as receiver:
        os.environ.update(receiver.environ)   # OTEL_EXPORTER_OTLP_ENDPOINT, _PROTOCOL
        ... export ...
        receiver.span_count()                  # spans received so far
        receiver.write_traces(path)            # everything received, as OTLP JSON

Run as a script it is that child: it prints the receiver's port, then answers one line per command
read from stdin (``count``, ``write PATH``) until stdin closes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Self

REPO = Path(__file__).resolve().parents[1]


class ReceiverProcess:
    def __init__(self, protocol: str = "http") -> None:
        self.protocol = protocol
        self.proc: subprocess.Popen[str] | None = None
        self.environ: dict[str, str] = {}

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.receiver", self.protocol],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.environ = json.loads(self.proc.stdout.readline())
        return self

    def _ask(self, line: str) -> str:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def span_count(self) -> int:
        return int(self._ask("count"))

    def write_traces(self, path: Path) -> Path:
        self._ask(f"write {path}")
        return path

    def counts(self) -> dict[str, dict[str, int]]:
        """Spans received so far: service.name -> span name -> count."""
        return json.loads(self._ask("counts"))

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _serve(protocol: str) -> None:
    from tests.megatron_cpu.otlp_receiver import OtlpReceiver

    with OtlpReceiver(protocol, max_requests=1_000_000, max_duration_s=3600.0) as receiver:
        print(json.dumps(receiver.environ()), flush=True)
        for line in sys.stdin:
            command, _, argument = line.strip().partition(" ")
            if command == "count":
                print(receiver.span_count(), flush=True)
            elif command == "counts":
                counts: dict[str, dict[str, int]] = {}
                for resource_spans in receiver.traces()["resourceSpans"]:
                    service = next(
                        (a["value"].get("stringValue") for a in resource_spans.get("resource", {}).get("attributes", [])
                         if a["key"] == "service.name"),
                        "",
                    )  # fmt: skip
                    names = counts.setdefault(service, {})
                    for scope in resource_spans.get("scopeSpans", []):
                        for span in scope.get("spans", []):
                            names[span["name"]] = names.get(span["name"], 0) + 1
                print(json.dumps(counts), flush=True)
            elif command == "write":
                receiver.write_traces(Path(argument))
                print("ok", flush=True)
            else:
                print("?", flush=True)


if __name__ == "__main__":
    _serve(sys.argv[1] if len(sys.argv) > 1 else "http")
