"""The inference server's GenAI telemetry (``_genai.py``, issue 40): every name is the conventions'
(checked against the pinned opentelemetry-semantic-conventions package), the histograms carry the
conventions' bucket boundaries, and the ``serve_*`` calls continue a W3C trace, set typed
attributes, record the metrics, and never raise on what a server may hand them."""

from __future__ import annotations

import asyncio
import re
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.semconv.schemas import Schemas
from runtime_pkg_support import specs_runtime_in_memory

from codegen.otel_runtime import _genai
from codegen.spec.load import load_project
from tests.support.processors import metric_points

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
PARENT_ID = 0xB7AD6B7169203331


def _pinned(package: str) -> str:
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{package}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"constraints.txt pins no {package}")


# The names are checked against the pinned opentelemetry-semantic-conventions (tox -e test and
# runtime); tox -e sdk-oldest installs SDK 1.27's own 0.48b0, which predates GenAI 1.37.0.
needs_pinned_conventions = pytest.mark.skipif(
    version("opentelemetry-semantic-conventions") != _pinned("opentelemetry-semantic-conventions"),
    reason="the installed opentelemetry-semantic-conventions is not constraints.txt's (tox -e "
    "sdk-oldest: SDK 1.27's 0.48b0 predates the GenAI names); tox -e test checks them",
)


def _advised_bounds(bounds: list[float]) -> list[float]:
    """The bounds this SDK gives a histogram created with ``bounds`` as its advice (older APIs,
    1.27 among them, take no advice: their default buckets)."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("probe")
    try:
        histogram = meter.create_histogram("probe", explicit_bucket_boundaries_advisory=bounds)
    except TypeError:  # an API without the advice (1.27), as the runtime's _metrics falls back
        histogram = meter.create_histogram("probe")
    histogram.record(1.0)
    data = reader.get_metrics_data()
    return list(data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points[0].explicit_bounds)


def convention_attributes() -> set[str]:
    names = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_") and isinstance(v, str)}
    return names | {error_attributes.ERROR_TYPE}


def convention_metrics() -> dict[str, str]:
    """Metric name -> unit, from the package's create_* functions."""
    units = {}

    class Meter:
        def create_histogram(self, name: str, unit: str = "", description: str = "") -> None:
            units[name] = unit

    for key, fn in vars(gen_ai_metrics).items():
        if key.startswith("create_gen_ai_"):
            fn(Meter())
    return units


@needs_pinned_conventions
def test_the_pinned_package_carries_the_convention_version():
    assert f"https://opentelemetry.io/schemas/{_genai.GENAI_CONVENTIONS}" in {s.value for s in Schemas}


@needs_pinned_conventions
def test_every_gen_ai_name_the_specs_declare_is_the_conventions():
    project = load_project(SPECS)
    declared = {a.key for a in project.attributes if a.key.startswith("gen_ai.") or a.key == "error.type"}
    assert declared, "specs/telemetry.yaml declares no GenAI attribute"
    assert declared <= convention_attributes(), sorted(declared - convention_attributes())
    metrics = {m.name: m.unit for m in project.metrics if m.name.startswith("gen_ai.")}
    assert set(metrics) == set(_genai.BUCKETS)
    conventions = convention_metrics()
    assert {name: conventions.get(name) for name in metrics} == metrics


@needs_pinned_conventions
def test_every_gen_ai_name_the_runtime_sets_is_the_conventions():
    source = Path(_genai.__file__).read_text(encoding="utf-8")
    used = set(re.findall(r'"((?:gen_ai|error)\.[a-z_.]+)"', source))
    assert used - set(_genai.BUCKETS) <= convention_attributes(), sorted(used - convention_attributes())
    for _key, attribute, _kind in _genai._REQUEST_KEYS:
        assert attribute in convention_attributes()


def test_the_docs_name_the_convention_version():
    """The generated docs take the metrics' descriptions and the groups' from the specs."""
    project = load_project(SPECS)
    version = _genai.GENAI_CONVENTIONS
    for metric in project.metrics:
        if metric.name.startswith("gen_ai."):
            assert f"GenAI semconv {version}" in metric.description, metric.name
    stated = f"OpenTelemetry GenAI semantic conventions {version}"
    assert stated in {g.name: g.description for g in project.groups}["inference"]
    assert f"GenAI semconv {version}" in (REPO / "generated" / "docs" / "metrics.md").read_text(
        encoding="utf-8"
    )


def test_bucket_boundaries_increase():
    for name, bounds in _genai.BUCKETS.items():
        assert list(bounds) == sorted(set(bounds)), name


@pytest.fixture
def served(importable: Path, unique_top: str, exit_hooks: Any, monkeypatch: pytest.MonkeyPatch):
    """The runtime rendered from the real specs, on SDK providers (in-memory), inference on."""
    served = specs_runtime_in_memory(importable, unique_top, monkeypatch, "inference")
    assert "inference" in served.enabled
    served.quart = SimpleNamespace(request=None)
    monkeypatch.setitem(sys.modules, "quart", served.quart)
    served.app = App()
    served.otel.serve_app(served.app)
    yield served
    served.otel.reset()


class App:
    """What serve_app registers on: Quart's before_request and after_request."""

    def __init__(self) -> None:
        self.before: list[Any] = []
        self.after: list[Any] = []

    def before_request(self, fn: Any) -> Any:
        self.before.append(fn)
        return fn

    def after_request(self, fn: Any) -> Any:
        self.after.append(fn)
        return fn


def arrive(served: SimpleNamespace, path: str, headers: dict[str, str]) -> None:
    """What Quart does before dispatching a request (in the request's task: here, this thread)."""
    served.quart.request = SimpleNamespace(path=path, headers=headers)
    for fn in served.app.before:
        assert _run(fn) is None


def _run(fn: Any, *args: Any) -> Any:
    """Run the coroutine function ``fn`` to its end in this context, as Quart awaits its request
    functions in the request's own task (the functions never suspend)."""
    coroutine = fn(*args)
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError(f"{fn} suspended")


def respond(served: SimpleNamespace, status: int) -> None:
    """What Quart does with its after_request functions once the response exists."""
    response = SimpleNamespace(status_code=status)
    for fn in served.app.after:
        assert _run(fn, response) is response


def test_a_request_continues_the_clients_trace_and_is_attributed(served):
    otel = served.otel
    traceparent = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"
    arrive(served, "/v1/chat/completions", {"traceparent": traceparent})
    span = otel.start_span("chat", lambda: {"gen_ai.operation.name": "chat"})
    otel.serve_attributes(
        {"model": "m", "max_tokens": 7, "temperature": 0, "top_k": 3, "n": 2, "stream": False, "x": 1}
    )
    results = [
        {
            "uid": "chatcmpl-1",
            "events": [
                {"type": "ADD_ENGINE", "timestamp": 10.0},
                *[{"type": "GENERATED_TOKEN", "timestamp": 10.5 + i} for i in range(3)],
            ],
        },
        {"uid": "chatcmpl-2", "events": []},
    ]
    otel.serve_response(results, [{"finish_reason": "length"}, {"finish_reason": "stop"}], 11, 6)
    span.end()
    respond(served, 200)
    from opentelemetry import trace

    assert not trace.get_current_span().get_span_context().is_valid  # the client's context is gone
    (finished,) = served.spans.get_finished_spans()
    assert finished.context.trace_id == TRACE_ID
    assert finished.parent is not None and finished.parent.span_id == PARENT_ID and finished.parent.is_remote
    assert {k: v for k, v in finished.attributes.items() if k != "megatron.span_group"} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.request.max_tokens": 7,
        "gen_ai.request.temperature": 0.0,
        "gen_ai.request.top_k": 3.0,
        "gen_ai.request.choice.count": 2,
        "gen_ai.request.stream": False,
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.finish_reasons": ("length", "stop"),
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 6,
    }
    recorded = metric_points(served.reader)
    ttft = recorded["gen_ai.server.time_to_first_token"]
    assert [(p.count, p.sum) for p in ttft] == [(1, 0.5)]
    assert list(ttft[0].explicit_bounds) == _advised_bounds(
        list(_genai.BUCKETS["gen_ai.server.time_to_first_token"])
    )
    assert [(p.count, p.sum) for p in recorded["gen_ai.server.time_per_output_token"]] == [(1, 1.0)]
    usage = {p.attributes["gen_ai.token.type"]: p.sum for p in recorded["gen_ai.client.token.usage"]}
    assert usage == {"input": 11, "output": 6}
    assert all(p.attributes["gen_ai.request.model"] == "m" for p in recorded["gen_ai.client.token.usage"])
    (duration,) = recorded["gen_ai.server.request.duration"]
    assert duration.count == 1 and "error.type" not in duration.attributes
    assert dict(duration.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "megatron",
        "gen_ai.request.model": "m",
    }
    assert list(duration.explicit_bounds) == _advised_bounds(
        list(_genai.BUCKETS["gen_ai.server.request.duration"])
    )


def test_an_error_sets_error_type_and_status(served):
    otel = served.otel
    arrive(served, "/completions", {})
    span = otel.start_span("text_completion")
    otel.serve_error(500)
    span.end()
    respond(served, 500)
    arrive(served, "/v1/completions", {})
    respond(served, 400)  # an answer the endpoint gave without serve_error: its status is the type
    (finished,) = served.spans.get_finished_spans()
    assert finished.parent is None
    assert finished.attributes["error.type"] == "500"
    assert finished.status.status_code.name == "ERROR"
    durations = metric_points(served.reader)["gen_ai.server.request.duration"]
    assert sorted(p.attributes["error.type"] for p in durations) == ["400", "500"]


def test_nothing_raises_on_what_a_server_may_hand_over(served):
    otel = served.otel
    arrive(served, "/health", {"traceparent": f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"})  # no GenAI route
    otel.serve_app(None)
    arrive(served, "/chat/completions", {"traceparent": "garbage"})
    span = otel.start_span("chat")
    otel.serve_attributes(None)
    otel.serve_attributes({"max_tokens": "many", "temperature": None, "top_p": object()})
    otel.serve_response(None, None, None, None)
    otel.serve_response([object()], [object(), {"finish_reason": 3}], "5", None)
    otel.serve_error(None)
    span.end()
    (finished,) = served.spans.get_finished_spans()
    assert "gen_ai.request.max_tokens" not in finished.attributes
    assert "gen_ai.usage.input_tokens" not in finished.attributes


def test_off_the_calls_do_nothing(otel):
    otel.serve_app(None)
    otel.serve_attributes({"max_tokens": 3})
    otel.serve_response([], [], 1, 1)
    otel.serve_error(400)
    from opentelemetry import trace

    assert not trace.get_current_span().get_span_context().is_valid


class BadRequest(Exception):
    """What Quart's request.get_json() raises on a body that is not JSON (its code: 400)."""

    code = 400


def test_a_body_that_is_not_json_sets_error_type_to_its_status(served):
    otel = served.otel

    async def get_json(fails: BaseException | None) -> Any:
        if fails is not None:
            raise fails
        return {"prompt": "x"}

    async def endpoint(fails: BaseException | None) -> Any:
        span = otel.start_span("text_completion")
        try:
            return await otel.serve_body("error.type", get_json(fails))
        finally:
            span.end()

    arrive(served, "/v1/completions", {})
    assert asyncio.run(endpoint(None)) == {"prompt": "x"}
    respond(served, 200)
    for error, status in ((BadRequest("not JSON"), 400), (ValueError("no code"), 500)):
        arrive(served, "/v1/completions", {})
        with pytest.raises(type(error)):  # the exception goes on as it is
            asyncio.run(endpoint(error))
        respond(served, status)
    found = [s.attributes.get("error.type") for s in served.spans.get_finished_spans()]
    assert found == [None, "400", "ValueError"]
    durations = metric_points(served.reader)["gen_ai.server.request.duration"]
    assert sorted(p.attributes.get("error.type", "") for p in durations) == ["", "400", "ValueError"]


def test_a_streamed_answer_records_first_token_and_duration_at_its_end(served):
    """The span handed over to the stream (``otel.stream``): time to first token at its first
    chunk, the request's duration when it is exhausted (not when the handler returned); a stream
    the client leaves has neither a duration nor a second end."""
    otel = served.otel

    async def chunks(count: int) -> Any:
        for i in range(count):
            await asyncio.sleep(0)
            yield f"data: {i}\n\n"

    def handler(count: int) -> Any:
        arrive(served, "/v1/chat/completions", {})
        span = otel.start_span("chat")
        try:
            return otel.stream(span, chunks(count))
        finally:
            span.end()

    async def read(stream: Any, leave_after: int | None = None) -> list[str]:
        got = []
        async for chunk in stream:
            got.append(chunk)
            if leave_after is not None and len(got) == leave_after:
                await stream.aclose()
                break
        return got

    stream = handler(3)
    respond(served, 200)  # the response exists before its body is streamed
    assert "gen_ai.server.request.duration" not in metric_points(served.reader)
    assert served.spans.get_finished_spans() == ()
    assert asyncio.run(read(stream)) == ["data: 0\n\n", "data: 1\n\n", "data: 2\n\n"]
    left = handler(3)
    respond(served, 200)
    assert asyncio.run(read(left, leave_after=1)) == ["data: 0\n\n"]
    recorded = metric_points(served.reader)
    assert [p.count for p in recorded["gen_ai.server.time_to_first_token"]] == [2]
    (duration,) = recorded["gen_ai.server.request.duration"]
    assert duration.count == 1 and "error.type" not in duration.attributes
    spans = served.spans.get_finished_spans()
    assert [(s.name, s.status.status_code.name) for s in spans] == [("chat", "UNSET"), ("chat", "ERROR")]


def test_the_response_goes_on_the_request_span_while_a_child_is_current(served):
    """The response's formatting is a child span of the request's: serve_response, called inside
    it, still sets the response's attributes on the request's span (noted by serve_span)."""
    otel = served.otel
    arrive(served, "/v1/completions", {})
    span = otel.start_span("text_completion")
    otel.serve_span()
    formatting = otel.start_span("megatron.inference.format")
    otel.serve_response([{"uid": "cmpl-1"}], [{"finish_reason": "stop"}], 3, 2)
    formatting.end()
    span.end()
    respond(served, 200)
    child, parent = served.spans.get_finished_spans()
    assert parent.name == "text_completion" and child.parent.span_id == parent.context.span_id
    assert parent.attributes["gen_ai.usage.input_tokens"] == 3
    assert parent.attributes["gen_ai.response.id"] == "cmpl-1"
    assert "gen_ai.usage.input_tokens" not in child.attributes
