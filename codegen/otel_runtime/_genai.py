"""The inference server's requests as the OpenTelemetry GenAI semantic conventions describe them.

The specs (``specs/inference.yaml``) call these from Megatron's dynamic text-generation server,
each while the ``inference`` group records:

- ``serve_app(app)`` once the server's Quart app exists: before each request of a GenAI endpoint
  (``OPERATIONS``) the request's W3C ``traceparent`` (and ``tracestate``) becomes the current
  context of its task, so the endpoint's span continues the client's trace, and its start is
  noted; once the response exists the request duration is recorded, with ``error.type`` when the
  status is 4xx or 5xx, and the context restored;
- ``serve_span()`` at the top of an endpoint (its span is current): the operation's attributes;
- ``serve_attributes(body)`` once the JSON body is parsed: the ``gen_ai.request.*`` attributes;
- ``serve_error(error_type)`` on an error path: ``error.type`` on the request's span;
- ``serve_body(key, body)`` around the endpoint's ``request.get_json()``: the awaited body as it
  is; when reading it raises (a body that is not JSON: Quart's 400), ``key`` (``error.type``) is
  the HTTP status on the request's span before the exception goes on;
- ``serve_response(results, choices, input_tokens, output_tokens)`` before the
  answer is sent: the ``gen_ai.response.*`` and ``gen_ai.usage.*`` attributes, token usage, and
  time to first token and per output token from the engine's own request events.

and, while the ``inference_steps`` group records, from the dynamic inference engine's step
(``DynamicInferenceEngine.async_forward``, once the step's forward has run):

- ``engine_step(context)``: the step's batch (prefill and decode tokens, active requests) and the
  KV-cache blocks in use, as attributes of the step's span and as ``megatron.inference.*`` metrics
  (the GenAI conventions name no engine metric). Host-side counters only: no device sync.

A streamed response (the endpoint's span handed over to its stream, ``_streams.stream``) is
answered once its stream ends: the stream asks ``stream_request()`` for the request's bookkeeping
when it takes the span, records time to first token at its first chunk (``stream_chunk``) and the
request duration when it is exhausted, or fails (with ``error.type``: the exception's class), in
``stream_end``; a stream closed or abandoned before its end (the client went away) has no
duration, as a request without a response.

Names, units and histogram bucket boundaries are the conventions' (``GENAI_CONVENTIONS``);
``tests/runtime_pkg/test_genai.py`` checks every name against the pinned
``opentelemetry-semantic-conventions`` package. Nothing here raises into the server.
"""

from __future__ import annotations

import contextvars
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ._state import PROCESS, flag, log_once

GENAI_CONVENTIONS = "1.37.0"
"""The OpenTelemetry semantic-conventions version whose GenAI spans and metrics these follow."""

PROVIDER = "megatron"

REQUEST_DURATION = "gen_ai.server.request.duration"
TIME_TO_FIRST_TOKEN = "gen_ai.server.time_to_first_token"
TIME_PER_OUTPUT_TOKEN = "gen_ai.server.time_per_output_token"
TOKEN_USAGE = "gen_ai.client.token.usage"

# The conventions' ExplicitBucketBoundaries advice for each histogram.
# fmt: off
BUCKETS: dict[str, tuple[float, ...]] = {
    REQUEST_DURATION: (
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ),
    TIME_TO_FIRST_TOKEN: (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    ),
    TIME_PER_OUTPUT_TOKEN: (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    ),
    TOKEN_USAGE: (
        1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
    ),
}
# fmt: on

# request body key -> attribute (the values the client asked for, before the server's defaults)
_REQUEST_KEYS = (
    ("model", "gen_ai.request.model", str),
    ("max_tokens", "gen_ai.request.max_tokens", int),
    ("max_completion_tokens", "gen_ai.request.max_tokens", int),
    ("temperature", "gen_ai.request.temperature", float),
    ("top_p", "gen_ai.request.top_p", float),
    ("top_k", "gen_ai.request.top_k", float),
    ("n", "gen_ai.request.choice.count", int),
    ("stream", "gen_ai.request.stream", bool),
    ("seed", "gen_ai.request.seed", int),
)
_TRACE_HEADERS = ("traceparent", "tracestate")


class _Request:
    """One request's bookkeeping, kept in its task's context."""

    __slots__ = ("error_type", "model", "operation", "span", "start", "streamed", "token")

    def __init__(self, operation: str, start: float) -> None:
        self.operation = operation
        self.start = start
        self.model: str | None = None
        self.error_type: str | None = None
        self.token: Any = None  # the client's context, attached for the request
        self.streamed = False  # answered by a stream: its end records the duration
        self.span: Any = None  # the endpoint's span (serve_span), whatever child is current later

    def attributes(self) -> dict[str, Any]:
        """The attributes every metric of the request carries."""
        found: dict[str, Any] = {
            "gen_ai.operation.name": self.operation,
            "gen_ai.provider.name": PROVIDER,
        }
        if self.model is not None:
            found["gen_ai.request.model"] = self.model
        return found


_CURRENT: contextvars.ContextVar[_Request | None] = contextvars.ContextVar(
    "megatron_otel_request", default=None
)


def _record(name: str, value: float, attributes: Mapping[str, Any]) -> None:
    recorder = PROCESS.run.recorders.get(name)
    if recorder is None or not flag("METRICS"):
        return
    try:
        # a histogram's record(value, attributes)
        recorder(value, attributes)  # type: ignore[call-arg]
    except Exception:
        log_once(f"record:{name}", "recording metric %r failed", name, exc_info=True)


def _current_span() -> Any:
    from opentelemetry import trace

    span = trace.get_current_span()
    return span if span.is_recording() else None


def _request_span() -> Any:
    """The request's span (the endpoint's, noted by ``serve_span``) while it records, though a
    child span (the response's formatting) is current; else the current span."""
    state = _CURRENT.get()
    span = state.span if state is not None else None
    return span if span is not None and span.is_recording() else _current_span()


# the endpoints' routes -> their GenAI operation
OPERATIONS = {
    "/v1/completions": "text_completion",
    "/completions": "text_completion",
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
}


def serve_app(app: Any) -> None:
    """Register the request bookkeeping on the server's Quart ``app``: before each request of a
    GenAI endpoint its W3C trace context becomes current and its start is noted; after it the
    duration is recorded and the context restored. Never raises."""
    try:
        app.before_request(_before_request)
        app.after_request(_after_request)
    except Exception:
        log_once("serve_app", "registering the request telemetry failed", exc_info=True)


async def _before_request() -> None:
    if PROCESS.run.tracer is None:
        return
    quart = sys.modules.get("quart")
    request = getattr(quart, "request", None)
    operation = OPERATIONS.get(getattr(request, "path", None) or "")
    if operation is not None:
        _start_request(operation, request)


async def _after_request(response: Any) -> Any:
    state = _CURRENT.get()
    if state is not None:
        _CURRENT.set(None)
        _finish(state, response)
    return response


def _start_request(operation: str, request: Any) -> None:
    """Continue the client's trace (the request's ``traceparent``/``tracestate``) in this request's
    task and note the request's start; ``_finish`` records its duration and restores the context."""
    try:
        headers = getattr(request, "headers", None) or {}
        carrier = {key: headers.get(key) for key in _TRACE_HEADERS if headers.get(key)}
        state = _Request(operation, time.perf_counter())
        if carrier:
            from opentelemetry import context
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            # current until the response exists: the server span started next is the remote
            # span's child
            state.token = context.attach(TraceContextTextMapPropagator().extract(carrier))
        _CURRENT.set(state)
    except Exception:
        log_once("serve_start", "starting the request's telemetry failed", exc_info=True)


def _finish(state: _Request, response: Any) -> Any:
    """Record the request's duration once the response exists (a streamed one: when its stream
    ends), restore the context the request started in; return the response as it is."""
    if state.token is not None:
        try:
            from opentelemetry import context

            context.detach(state.token)
        except Exception:
            log_once("serve_detach", "restoring the context after a request failed", exc_info=True)
        state.token = None
    if state.streamed:
        return response
    try:
        attributes = state.attributes()
        status = getattr(response, "status_code", None)
        error_type = state.error_type or (
            str(status) if isinstance(status, int) and status >= 400 else None
        )
        if error_type is not None:
            attributes["error.type"] = error_type
        _record(REQUEST_DURATION, time.perf_counter() - state.start, attributes)
    except Exception:
        log_once("serve_finish", "recording the request duration failed", exc_info=True)
    return response


def serve_span() -> None:
    """``gen_ai.operation.name`` and ``gen_ai.provider.name`` on the endpoint's span (current)."""
    try:
        state = _CURRENT.get()
        span = _current_span()
        if state is not None and span is not None:
            state.span = span
            span.set_attributes(state.attributes())
    except Exception:
        log_once("serve_span", "setting the operation attributes failed", exc_info=True)


def serve_attributes(body: Any) -> None:
    """Set the ``gen_ai.request.*`` attributes of the request body on the request's span."""
    if not isinstance(body, Mapping):
        return
    try:
        found: dict[str, Any] = {}
        for key, attribute, kind in _REQUEST_KEYS:
            value = body.get(key)
            if value is None or attribute in found:
                continue
            try:
                found[attribute] = kind(value) if kind is not bool else bool(value)
            except (TypeError, ValueError):
                continue
        state = _CURRENT.get()
        if state is not None and "gen_ai.request.model" in found:
            state.model = found["gen_ai.request.model"]
        span = _request_span()
        if span is not None and found:
            span.set_attributes(found)
    except Exception:
        log_once("serve_attributes", "setting the request attributes failed", exc_info=True)


def serve_error(error_type: object) -> None:
    """``error.type`` on the request's span (and the request's duration) for an error answer."""
    try:
        value = str(error_type)
        state = _CURRENT.get()
        if state is not None:
            state.error_type = value
        span = _request_span()
        if span is not None:
            from opentelemetry.trace import Status, StatusCode

            span.set_attribute("error.type", value)
            span.set_status(Status(StatusCode.ERROR, value))
    except Exception:
        log_once("serve_error", "setting error.type failed", exc_info=True)


def serve_body(key: str, body: Any) -> Any:
    """``body`` (the awaitable ``request.get_json()`` returns) as it is while nothing records, else
    an awaitable of the same result that sets ``key`` (``error.type``) on the request's span when
    awaiting it raises: the exception's HTTP status (Quart's BadRequest: 400), or its class."""
    if PROCESS.run.tracer is None:
        return body
    return _body(key, body)


async def _body(key: str, body: Any) -> Any:
    try:
        return await body
    except Exception as error:
        code = getattr(error, "code", None)
        serve_error(code if isinstance(code, int) else type(error).__qualname__)
        raise


def _events(result: Any) -> list[tuple[str, float]]:
    events = (
        result.get("events") if isinstance(result, Mapping) else getattr(result, "events", None)
    )
    found = []
    for event in events or ():
        kind = (
            event.get("type")
            if isinstance(event, Mapping)
            else getattr(getattr(event, "type", None), "name", None)
        )
        stamp = (
            event.get("timestamp")
            if isinstance(event, Mapping)
            else getattr(event, "timestamp", None)
        )
        if isinstance(kind, str) and isinstance(stamp, (int, float)):
            found.append((kind, float(stamp)))
    return found


def _token_times(results: Iterable[Any], attributes: Mapping[str, Any]) -> None:
    """Time to first token and per output token of each engine request, from its events."""
    for result in results:
        events = _events(result)
        added = next((t for kind, t in events if kind == "ADD_ENGINE"), None)
        tokens = [t for kind, t in events if kind == "GENERATED_TOKEN"]
        if added is None or not tokens:
            continue
        _record(TIME_TO_FIRST_TOKEN, max(0.0, tokens[0] - added), attributes)
        if len(tokens) > 1:
            _record(
                TIME_PER_OUTPUT_TOKEN,
                max(0.0, (tokens[-1] - tokens[0]) / (len(tokens) - 1)),
                attributes,
            )


def serve_response(results: Any, choices: Any, input_tokens: Any, output_tokens: Any) -> None:
    """The response's attributes on the request's span; token usage and token times recorded. The
    response id is the first engine request's ``uid`` (what the endpoints answer with from
    megatron-core 0.20 on; 0.19.2's records carry none and its endpoints make the id at return)."""
    try:
        found: dict[str, Any] = {}
        first = results[0] if isinstance(results, (list, tuple)) and results else None
        response_id = first.get("uid") if isinstance(first, Mapping) else None
        if response_id is not None:
            found["gen_ai.response.id"] = str(response_id)
        reasons = [c.get("finish_reason") for c in choices or () if isinstance(c, Mapping)]
        if reasons and all(isinstance(r, str) for r in reasons):
            found["gen_ai.response.finish_reasons"] = reasons
        if isinstance(input_tokens, int):
            found["gen_ai.usage.input_tokens"] = input_tokens
        if isinstance(output_tokens, int):
            found["gen_ai.usage.output_tokens"] = output_tokens
        span = _request_span()
        if span is not None and found:
            span.set_attributes(found)
        state = _CURRENT.get()
        attributes = state.attributes() if state is not None else {"gen_ai.provider.name": PROVIDER}
        for kind, count in (("input", input_tokens), ("output", output_tokens)):
            if isinstance(count, int):
                _record(TOKEN_USAGE, count, {**attributes, "gen_ai.token.type": kind})
        _token_times(results or (), attributes)
    except Exception:
        log_once("serve_response", "recording the response failed", exc_info=True)


def stream_request() -> _Request | None:
    """The current request, now answered by a stream (its duration is recorded at the stream's
    end), or None outside a GenAI request. Never raises."""
    state = _CURRENT.get()
    if state is not None:
        state.streamed = True
    return state


def stream_chunk(state: _Request) -> None:
    """The stream's first chunk: time to first token, from the request's start."""
    try:
        _record(TIME_TO_FIRST_TOKEN, time.perf_counter() - state.start, state.attributes())
    except Exception:
        log_once("stream_chunk", "recording the time to first token failed", exc_info=True)


def stream_end(state: _Request, error: BaseException | None = None) -> None:
    """The stream exhausted (``error`` None) or failed: the request's duration, with
    ``error.type`` the exception's class when it failed."""
    try:
        attributes = state.attributes()
        if error is not None:
            attributes["error.type"] = type(error).__qualname__
        _record(REQUEST_DURATION, time.perf_counter() - state.start, attributes)
    except Exception:
        log_once("stream_end", "recording the streamed request's duration failed", exc_info=True)


# the dynamic engine's step (specs/inference_engine.yaml); the GenAI conventions name none of these
STEP_TOKENS = "megatron.inference.step.tokens"
ACTIVE_REQUESTS = "megatron.inference.active_requests"
KV_BLOCKS_USED = "megatron.inference.kv_cache.blocks_used"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def engine_step(context: Any) -> None:
    """The engine step's batch, read from its ``DynamicInferenceContext`` once the forward has run:
    ``batch_dimensions`` (the step's tokens, prefill and decode requests; a decode request runs
    ``1 + num_speculative_tokens`` tokens, the rest are prefill tokens) and the KV-cache blocks
    outside the free pool (``kv_block_allocator.get_total_used()``: host-side arithmetic).
    Attributes on the current span (the step's), metrics recorded. Never raises."""
    try:
        batch = getattr(context, "batch_dimensions", None)
        tokens = _int(getattr(batch, "token_count", None))
        prefill_requests = _int(getattr(batch, "prefill_req_count", None))
        decode_requests = _int(getattr(batch, "decode_req_count", None))
        found: dict[str, int] = {}
        if tokens is not None and prefill_requests is not None and decode_requests is not None:
            per_decode = 1 + (_int(getattr(context, "num_speculative_tokens", 0)) or 0)
            decode = min(tokens, decode_requests * per_decode)
            found["megatron.inference.prefill_tokens"] = tokens - decode
            found["megatron.inference.decode_tokens"] = decode
            found["megatron.inference.active_requests"] = prefill_requests + decode_requests
        allocator = getattr(context, "kv_block_allocator", None)
        used = _int(allocator.get_total_used()) if allocator is not None else None
        if used is not None:
            found["megatron.inference.kv_cache.blocks_used"] = used
        span = _current_span()
        if span is not None and found:
            span.set_attributes(found)
        for kind in ("prefill", "decode"):
            count = found.get(f"megatron.inference.{kind}_tokens")
            if count:
                _record(STEP_TOKENS, count, {"megatron.inference.token.type": kind})
        for name, key in (
            (ACTIVE_REQUESTS, "megatron.inference.active_requests"),
            (KV_BLOCKS_USED, "megatron.inference.kv_cache.blocks_used"),
        ):
            recorder = PROCESS.run.recorders.get(name)
            if recorder is not None and key in found and flag("METRICS"):
                recorder(found[key])  # a gauge's set(value)
    except Exception:
        log_once("engine_step", "recording the engine step failed", exc_info=True)
