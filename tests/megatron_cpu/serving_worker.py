"""Megatron's dynamic inference server on localhost, on CPU; a subprocess of the serving tests.

    python serving_worker.py --out DIR [--delay-ms MS]

``megatron`` is whatever ``PYTHONPATH`` puts first: a pristine tree (megatron-core 0.19.2, or
Megatron-LM main) or one the specs instrumented. Everything on the request path is the tree's own:
``text_generation_server._server_process_worker`` (the function each server replica process runs)
builds the Quart app, registers the ``endpoints`` blueprints, starts the real ``InferenceClient``
and serves the app with hypercorn on a socket bound here to 127.0.0.1 (its port is written to
``DIR/port``). The client talks ZMQ to a stand-in for the inference coordinator and its engine, a
thread of this process (``StandInEngine``), which answers as they do: a CONNECT_ACK to the
handshake, then for each SUBMIT_REQUEST a ``DynamicInferenceRequest`` of the tree built, stepped
(ADD_ENGINE, ADD_CONTEXT, one GENERATED_TOKEN event per token, FINISH; events carry their own
timestamps), serialized with the tree's ``serialize()`` and detokenized as the coordinator does,
sent back as ENGINE_REPLY after ``--delay-ms``; streamed requests get one ENGINE_REPLY_PARTIAL per
token first. A prompt containing ``FAIL`` comes back FAILED with a transient error event (the
server answers 500); one containing ``SLOW`` is answered after 3 s (the client-disconnect case).

What is not the tree's own, and why:
- the tokenizer: a byte-level stand-in (``ByteTokenizer``: UTF-8 bytes as token ids, a chat
  template that tags each message with its role), since Megatron's tokenizers need model files.
  Main's streamed chat detokenizes incrementally with a Hugging Face fast tokenizer only (it
  checks for ``transformers.PreTrainedTokenizerFast`` under ``tokenizer._tokenizer.tokenizer``,
  and renders the chat template with it when it is there): the stand-in carries one built here
  that tokenizes, detokenizes and renders as the stand-in does (``hf_byte_tokenizer``, from the
  ``tokenizers`` and ``transformers`` packages of the 'serving' extra);
- ``time`` and ``uuid`` as the endpoint modules see them: ``time.time()`` fixed and ``uuid4()``
  counting from 1 (``Deterministic``), so the same requests give byte-identical responses
  ("created" and the response ids are otherwise the clock's and random) and the tests can compare
  an instrumented server's responses with the pristine one's.

With ``MEGATRON_OTEL_ENABLED=1`` telemetry is set up as a server process does it
(``otel.configure()``): into SDK providers writing ``DIR/capture.jsonl`` (``capture``), or with
``SERVING_WORKER_CAPTURE=0`` the runtime's own, from the environment.

The worker runs until SIGINT (``_server_process_worker`` returns on KeyboardInterrupt) and then
exits normally, so telemetry flushes at exit as in a server replica that is stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import itertools
import os
import signal
import socket
import sys
import threading
import time
import types
import uuid
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")

import py311_shims  # beside this script (a script's directory is the first on sys.path)

py311_shims.install()

FIXED_TIME = 1_700_000_000.0
SLOW_S = 3.0


def hf_byte_tokenizer() -> Any:
    """A Hugging Face fast tokenizer that is ``ByteTokenizer`` again (token ``i`` is byte ``i``,
    the same role-tagged chat template, as Jinja), built in process from its 256 tokens, held as
    Megatron's HF tokenizer wrapper holds it (``.tokenizer``); None without the packages (a tree
    then answers as it does without them)."""
    try:
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        return None
    # GPT-2's printable stand-ins for the 256 bytes, which the ByteLevel pre-tokenizer maps to
    keep = {*range(33, 127), *range(161, 173), *range(174, 256)}
    extra = iter(range(256, 512))
    chars = [chr(b) if b in keep else chr(next(extra)) for b in range(256)]
    native = Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}, unk_token=chars[0]))
    native.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            pre_tokenizers.Split(Regex("."), "isolated"),  # one token per byte
        ]
    )
    native.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=native)
    fast.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] or '' }}{% endfor %}<assistant>"
    )
    return types.SimpleNamespace(tokenizer=fast)


class ByteTokenizer:
    """A byte-level tokenizer with the methods the server calls: UTF-8 bytes are the token ids."""

    chat_template = "role-tagged"
    bos = None
    eos_id = 0
    eod = 0

    def __init__(self) -> None:
        self._tokenizer = hf_byte_tokenizer()

    def tokenize(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, ids: Any, **_: Any) -> str:
        return bytes(int(i) % 256 for i in ids).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict[str, Any]], tokenize: bool = True, **_: Any) -> Any:
        text = "".join(f"<{m['role']}>{m.get('content') or ''}" for m in messages) + "<assistant>"
        return self.tokenize(text) if tokenize else text


class Deterministic:
    """``time`` and ``uuid`` for the endpoint modules: a fixed wall clock, counted UUIDs."""

    def __init__(self) -> None:
        self._count = itertools.count(1)
        self._lock = threading.Lock()

    def time(self) -> float:
        return FIXED_TIME

    def uuid4(self) -> uuid.UUID:
        with self._lock:
            return uuid.UUID(int=next(self._count))


def make_deterministic(modules: list[Any]) -> None:
    shim = Deterministic()
    for module in modules:
        if hasattr(module, "time"):
            fake_time = types.SimpleNamespace(
                **{k: getattr(time, k) for k in dir(time) if not k.startswith("_")}
            )
            fake_time.time = shim.time
            module.time = fake_time
        if hasattr(module, "uuid"):
            fake_uuid = types.SimpleNamespace(
                **{k: getattr(uuid, k) for k in dir(uuid) if not k.startswith("_")}
            )
            fake_uuid.uuid4 = shim.uuid4
            module.uuid = fake_uuid


class StandInEngine(threading.Thread):
    """The coordinator and one engine behind a ZMQ ROUTER socket, as the InferenceClient sees them."""

    def __init__(self, tokenizer: ByteTokenizer, delay_s: float) -> None:
        super().__init__(daemon=True)
        import zmq

        self.zmq = zmq
        self.tokenizer = tokenizer
        self.delay_s = delay_s
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.pending: list[tuple[float, int, list[bytes]]] = []
        self.order = itertools.count()
        self.aborted: set[tuple[bytes, int]] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        import msgpack
        from megatron.core.inference.headers import Headers

        while not self.stopping.is_set():
            if self.socket.poll(timeout=2):
                identity, data = self.socket.recv_multipart()
                message = msgpack.unpackb(data, raw=False)
                header = Headers(message[0])
                if header == Headers.CONNECT:
                    self.socket.send_multipart(
                        [identity, msgpack.packb([Headers.CONNECT_ACK.value], use_bin_type=True)]
                    )
                elif header == Headers.SUBMIT_REQUEST:
                    self.submit(identity, message)
                elif header == Headers.ABORT_REQUEST:
                    self.aborted.add((identity, int(message[1])))
            now = time.monotonic()
            while self.pending and self.pending[0][0] <= now:
                _due, _n, frames = heapq.heappop(self.pending)
                identity, client_request_id = frames[0], int(frames[2])
                if (identity, client_request_id) not in self.aborted:
                    self.socket.send_multipart(frames[:2])

    def submit(self, identity: bytes, message: list[Any]) -> None:
        import msgpack
        import torch
        from megatron.core.inference.headers import Headers
        from megatron.core.inference.inference_request import DynamicInferenceRequest, Status
        from megatron.core.inference.sampling_params import SamplingParams

        client_request_id, prompt, sampling = message[1], message[2], message[3]
        params = SamplingParams.deserialize(sampling)
        prompt_ids = self.tokenizer.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        text = self.tokenizer.detokenize(prompt_ids)
        count = params.num_tokens_to_generate or 8
        request = DynamicInferenceRequest(
            request_id=client_request_id,
            prompt_tokens=torch.tensor(prompt_ids, dtype=torch.long),
            sampling_params=params,
        )
        if hasattr(request, "uid"):  # main: the response id; the engine's is random (uuid4)
            request.uid = "chatcmpl-" + hashlib.sha256(repr((prompt_ids, sampling)).encode()).hexdigest()[:32]
        request.add_event_add_engine()
        request.add_event_add_context()
        start = time.monotonic()
        due = start + (SLOW_S if "SLOW" in text else self.delay_s)
        if "FAIL" in text:
            from megatron.core.inference.contexts.dynamic_context import RequestOverflowError

            request.add_event_error_transient(
                RequestOverflowError(client_request_id, "stand-in engine: request failed")
            )
            request.add_event_fail()
            request.status = Status.FAILED
        else:
            tokens = [97 + (sum(prompt_ids) + i) % 26 for i in range(count)]
            step = (due - start) / (count + 1)
            for i, token in enumerate(tokens):
                request.add_event_generated_token(token)
                if getattr(params, "streaming", False):
                    partial = {"request_id": client_request_id, "new_tokens": [token]}
                    frame = msgpack.packb(
                        [Headers.ENGINE_REPLY_PARTIAL.value, client_request_id, partial], use_bin_type=True
                    )
                    heapq.heappush(
                        self.pending,
                        (start + step * (i + 1), next(self.order), [identity, frame, client_request_id]),
                    )
            request.generated_tokens = tokens
            request.generated_length = len(tokens)
            request.generated_log_probs = [-1.0] * len(tokens)
            request.ttft = step
            request.add_event_finish()
            request.status = Status.COMPLETED
        record = request.serialize()
        record["generated_text"] = self.tokenizer.detokenize(record.get("generated_tokens") or [])
        frame = msgpack.packb([Headers.ENGINE_REPLY.value, client_request_id, record], use_bin_type=True)
        heapq.heappush(self.pending, (due, next(self.order), [identity, frame, client_request_id]))

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)
        self.socket.close(linger=0)
        self.context.term()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from megatron.core.inference.text_generation_server.dynamic_text_gen_server import endpoints
    from megatron.core.inference.text_generation_server.dynamic_text_gen_server import (
        text_generation_server as tgs,
    )

    modules = [sys.modules[m] for m in list(sys.modules) if m.startswith(endpoints.__name__ + ".")]
    streaming = sys.modules.get(tgs.__name__.rpartition(".")[0] + ".openai_streaming")  # main's
    modules += [streaming] if streaming is not None else []
    make_deterministic(modules)

    providers: tuple[Any, ...] = ()
    if os.environ.get("MEGATRON_OTEL_ENABLED") == "1":
        if os.environ.get("SERVING_WORKER_CAPTURE", "1") == "1":
            providers = capture(out)
        else:  # the runtime's own providers from the environment (the benchmark: console)
            from megatron.core import otel

            otel.configure()

    tokenizer = ByteTokenizer()
    engine = StandInEngine(tokenizer, args.delay_ms / 1000.0)
    engine.start()

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    (out / "port.tmp").write_text(str(port))
    os.replace(out / "port.tmp", out / "port")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        tgs._server_process_worker(
            engine.address,
            tokenizer,
            0,
            port,
            parsers=None,
            verbose=False,
            fd=listener.fileno(),
            hostname="127.0.0.1",
        )
    finally:
        engine.stop()
        for provider in providers:
            provider.shutdown()
    return 0


def capture(out: Path) -> tuple[Any, ...]:
    """Telemetry on, as a server process sets it up (``otel.configure()``, the groups from
    ``MEGATRON_OTEL_SPAN_GROUPS``), into SDK providers that write OTLP JSON to ``out/capture.jsonl``
    (spans as they end, metrics when the worker stops)."""
    from megatron.core import otel
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from otlp_file import OtlpJsonMetricExporter, OtlpJsonSpanExporter

    path = str(out / "capture.jsonl")
    resource = Resource.create({"service.name": "megatron-serving-test"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(OtlpJsonSpanExporter(path)))
    reader = PeriodicExportingMetricReader(OtlpJsonMetricExporter(path), export_interval_millis=3_600_000)
    meter_provider = MeterProvider(metric_readers=[reader], resource=resource)
    otel.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return (meter_provider, tracer_provider)


if __name__ == "__main__":
    sys.exit(main())
