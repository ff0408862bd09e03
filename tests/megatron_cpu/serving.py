"""The serving tests' harness: Megatron's dynamic inference server in a subprocess
(``serving_worker.py``) and real HTTP requests to it from this process.

``Server(root, out)`` starts the worker with ``root`` importable as ``megatron`` (a pristine or an
instrumented tree), waits for ``/health``, and stops it with SIGINT (the worker then exits
normally, flushing telemetry). ``Server.post`` sends one request with ``http.client`` and returns
what came back (status, content type, body bytes); ``Server.post_many`` sends several at once,
each from its own thread and connection; ``Server.disconnect`` sends a request and closes the
connection before the answer.

``CASES`` are the requests every tree answers (``STREAM_CASES`` only main, whose chat endpoint
streams); their responses on a pristine tree are the baseline that an instrumented tree with
telemetry off must equal byte for byte.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from codegen.capture import CapturedMetric, CapturedSpan, iter_records

WORKER = Path(__file__).resolve().parent / "serving_worker.py"
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Case:
    """One request: where it goes, its body (bytes as sent) and its headers."""

    path: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = tuple(JSON.items())


def _case(path: str, payload: Any) -> Case:
    return Case(path, json.dumps(payload).encode())


CASES: dict[str, Case] = {
    "completion": _case("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 6}),
    "completion-unversioned": _case("/completions", {"prompt": "Hello", "max_tokens": 3, "temperature": 0.5}),
    "completion-batch": _case(
        "/v1/completions", {"prompt": ["one", "two", "three"], "max_tokens": 4, "top_p": 0.9, "top_k": 5}
    ),
    "completion-tokens": _case("/v1/completions", {"prompt": [72, 105, 33], "max_tokens": 2}),
    "chat": _case(
        "/v1/chat/completions",
        {
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "max_tokens": 5,
        },
    ),
    "chat-unversioned": _case(
        "/chat/completions", {"messages": [{"role": "user", "content": "Two?"}], "max_tokens": 4, "n": 2}
    ),
    "bad-json": Case("/v1/completions", b'{"prompt": "unterminated', tuple(JSON.items())),
    "missing-prompt": _case("/v1/completions", {"max_tokens": 4}),
    "chat-missing-messages": _case("/v1/chat/completions", {"max_tokens": 4}),
    "engine-failed": _case("/v1/completions", {"prompt": "please FAIL", "max_tokens": 4}),
    "chat-engine-failed": _case(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "FAIL now"}], "max_tokens": 4}
    ),
}

# answered after SLOW_S (serving_worker.SLOW_S): the client goes away before
SLOW_S = 3.0
SLOW_CASE = _case("/v1/completions", {"prompt": "SLOW request", "max_tokens": 4})

STREAM_CASES: dict[str, Case] = {
    "chat-stream": _case(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Stream"}], "max_tokens": 5, "stream": True},
    ),
}
# streamed over SLOW_S: the client goes away before the first chunk
STREAM_SLOW_CASE = _case(
    "/v1/chat/completions",
    {"messages": [{"role": "user", "content": "SLOW stream"}], "max_tokens": 4, "stream": True},
)


def sse_content(reply: Reply) -> str:
    """The text a streamed chat answer spells: its chunks' ``delta.content``, in order."""
    text = ""
    for line in reply.body.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[len("data: ") :])["choices"]:
                text += (choice.get("delta") or {}).get("content") or ""
    return text


def concurrent_cases(count: int = 32) -> list[Case]:
    """``count`` distinct requests, completions and chats alternating."""
    cases = []
    for i in range(count):
        if i % 2:
            cases.append(
                _case(
                    "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 3 + i % 4},
                )
            )
        else:
            cases.append(_case("/v1/completions", {"prompt": f"request number {i}", "max_tokens": 2 + i % 5}))
    return cases


def traceparent(n: int) -> dict[str, str]:
    """A client's W3C trace context: trace id ``n``, parent span id ``n``, sampled."""
    return {"traceparent": f"00-{n:032x}-{n:016x}-01"}


def read_capture(path: Path) -> tuple[list[CapturedSpan], list[CapturedMetric]]:
    """The spans and the metrics of an OTLP JSON capture; metrics exported more than once
    (cumulative) count once, as last exported."""
    records = list(iter_records(path)) if path.is_file() else []
    metrics = {r.name: r for r in records if isinstance(r, CapturedMetric)}
    return [r for r in records if isinstance(r, CapturedSpan)], list(metrics.values())


def without_id(reply: Reply) -> bytes:
    """The body with its top-level "id" blanked: 0.19.2's endpoints number their response ids with
    uuid4 (counted by the worker), so under concurrency the numbering follows arrival order."""
    document = json.loads(reply.body)
    document["id"] = None
    return json.dumps(document, sort_keys=True).encode()


class Server:
    def __init__(
        self, root: Path, out: Path, env: dict[str, str] | None = None, delay_ms: float = 20.0
    ) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
        environment.update(PYTHONPATH=str(root), PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
        environment.update(env or {})
        self.log = (out / "worker.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "--out", str(out), "--delay-ms", str(delay_ms)],
            cwd=out,
            env=environment,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.port = self._wait_ready()

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.out / "worker.log").read_text(errors="replace")

    def _wait_ready(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        port_file = self.out / "port"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serving worker exited {self.proc.returncode}:\n{self.output()[-4000:]}")
            if port_file.is_file():
                port = int(port_file.read_text())
                try:
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    connection.request("GET", "/health")
                    if connection.getresponse().status == 200:
                        return port
                except OSError:
                    pass
            time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError(f"serving worker not ready in {START_TIMEOUT_S}s:\n{self.output()[-4000:]}")

    def post(self, case: Case, headers: dict[str, str] | None = None, timeout: float = 60) -> Reply:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(
                "POST", case.path, body=case.body, headers={**dict(case.headers), **(headers or {})}
            )
            response = connection.getresponse()
            return Reply(response.status, response.getheader("Content-Type", ""), response.read())
        finally:
            connection.close()

    def post_many(self, cases: list[Case], headers: list[dict[str, str]] | None = None) -> list[Reply]:
        """``cases`` at once, each from its own thread and connection (with ``headers[i]``)."""
        extra = headers or [{} for _ in cases]
        with ThreadPoolExecutor(max_workers=len(cases)) as pool:
            return list(pool.map(self.post, cases, extra))

    def disconnect(self, case: Case, after_s: float = 0.3, headers: dict[str, str] | None = None) -> None:
        """Send ``case`` and close the connection ``after_s`` later, before the answer."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as conn:
            head = f"POST {case.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(case.body)}\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in [*case.headers, *(headers or {}).items()]) + "\r\n"
            conn.sendall(head.encode() + case.body)
            time.sleep(after_s)

    def stop(self) -> str:
        """SIGINT, then wait for the worker to exit; its output."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(
                    f"serving worker did not stop in {STOP_TIMEOUT_S}s:\n{self.output()[-4000:]}"
                ) from None
        self.log.close()
        return (self.out / "worker.log").read_text(errors="replace")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
