"""Megatron's dynamic inference server, served for real on localhost (issue 40).

The server's own Quart app and blueprints, from the tree as it is, served by hypercorn; the real
InferenceClient over ZMQ to a stand-in engine that answers with the tree's own request records
(``serving_worker.py``); real HTTP requests from this process (``serving.py``). Trees: the pinned
megatron-core 0.19.2 and Megatron-LM main (the snapshot; its inference server is the same with and
without #6438). What the pristine trees answer here is the baseline the instrumented trees are held
to (telemetry off: byte-identical).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

for _module, _why in (
    ("torch", "megatron-core's inference modules import torch (tox -e runtime installs it)"),
    ("quart", "the server is a Quart app (the 'serving' extra; tox -e runtime installs it)"),
    ("hypercorn", "the server runs on hypercorn (the 'serving' extra)"),
    ("zmq", "the InferenceClient talks ZMQ (pyzmq, the 'serving' extra)"),
    ("msgpack", "the InferenceClient's records are msgpack (the 'serving' extra)"),
    ("tokenizers", "main's streamed chat needs a Hugging Face fast tokenizer (the 'serving' extra)"),
    ("transformers", "main's streamed chat checks for transformers' fast tokenizer (the 'serving' extra)"),
):
    pytest.importorskip(_module, reason=_why)

from codegen.capture import CapturedSpan
from tests.megatron_cpu.serving import (
    CASES,
    SLOW_CASE,
    SLOW_S,
    STREAM_CASES,
    STREAM_SLOW_CASE,
    Reply,
    Server,
    concurrent_cases,
    read_capture,
    sse_content,
    traceparent,
    without_id,
)
from tests.support.upstream_main import snapshot

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

STATUS = {
    "completion": 200,
    "completion-unversioned": 200,
    "completion-batch": 200,
    "completion-tokens": 200,
    "chat": 200,
    "chat-unversioned": 200,
    "bad-json": 400,
    "missing-prompt": 400,
    "chat-missing-messages": 400,
    "engine-failed": 500,
    "chat-engine-failed": 500,
}


def expected_tokens(prompt_ids: list[int], count: int) -> list[int]:
    """What the stand-in engine generates for a prompt (serving_worker.StandInEngine.submit)."""
    return [97 + (sum(prompt_ids) + i) % 26 for i in range(count)]


def chat_prompt_ids(messages: list[dict[str, str]]) -> list[int]:
    """The stand-in tokenizer's chat template (serving_worker.ByteTokenizer)."""
    return list(("".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>").encode())


@pytest.fixture(scope="session", params=["0.19.2", "main"])
def pristine_tree(request, generation) -> tuple[str, Path]:
    if request.param == "0.19.2":
        return request.param, generation.source_root
    return request.param, snapshot("minus")


CASE_TRACE = {case: n for n, case in enumerate([*CASES, *STREAM_CASES], start=1)}
CONCURRENT_TRACE = 1000  # request i of the 32 carries trace id 1000 + i
SLOW_TRACE = 999
STREAM_SLOW_TRACE = 998


def streams(tree: str) -> dict[str, Any]:
    """The streamed cases a tree answers: main's chat endpoint streams, 0.19.2's cannot."""
    return STREAM_CASES if tree == "main" else {}


def exercise(server: Server, tree: str) -> dict[str, Any]:
    """Every case (the streamed ones where the tree streams), 32 concurrent requests, a client
    that goes away (and one that goes away from a stream) and a request after it; each request
    carries a traceparent of its own (``CASE_TRACE``, ``CONCURRENT_TRACE``, ``SLOW_TRACE``,
    ``STREAM_SLOW_TRACE``)."""
    cases = {**CASES, **streams(tree)}
    replies = {case: server.post(cases[case], traceparent(CASE_TRACE[case])) for case in cases}
    many = concurrent_cases()
    concurrent = server.post_many(many, [traceparent(CONCURRENT_TRACE + i) for i in range(len(many))])
    server.disconnect(SLOW_CASE, headers=traceparent(SLOW_TRACE))
    if streams(tree):
        server.disconnect(STREAM_SLOW_CASE, headers=traceparent(STREAM_SLOW_TRACE))
    time.sleep(SLOW_S + 0.5)  # the engine's late answer arrives for a request no longer waited on
    after = server.post(CASES["completion"], traceparent(CASE_TRACE["completion"]))
    return {"replies": replies, "concurrent": concurrent, "after_disconnect": after}


def serve(root: Path, out: Path, tree: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    with Server(root, out, env=env) as server:
        result = exercise(server, tree)
    result["log"] = server.output()
    result["capture"] = out / "capture.jsonl"
    result["spans"], result["metrics"] = read_capture(result["capture"])
    return result


@pytest.fixture(scope="session")
def baseline(pristine_tree, tmp_path_factory) -> dict[str, Any]:
    """What the pristine tree answers (``exercise``)."""
    name, root = pristine_tree
    result = serve(root, tmp_path_factory.mktemp(f"serve-pristine-{name}"), name)
    result["tree"] = name
    return result


def test_pristine_server_answers_each_case(baseline):
    replies: dict[str, Reply] = baseline["replies"]
    streamed = {case: 200 for case in streams(baseline["tree"])}
    assert {case: reply.status for case, reply in replies.items()} == {**STATUS, **streamed}
    completion = replies["completion"].json()
    prompt = json.loads(CASES["completion"].body)["prompt"]
    assert completion["object"] == "text_completion"
    assert completion["choices"][0]["generation_token_ids"] == expected_tokens(list(prompt.encode()), 6)
    assert completion["usage"] == {
        "prompt_tokens": len(prompt),
        "completion_tokens": 6,
        "total_tokens": len(prompt) + 6,
    }
    batch = replies["completion-batch"].json()
    assert [c["text"] for c in batch["choices"]] == [
        bytes(expected_tokens(list(p.encode()), 4)).decode() for p in ("one", "two", "three")
    ]
    chat = replies["chat-unversioned"].json()
    messages = json.loads(CASES["chat-unversioned"].body)["messages"]
    assert chat["object"] == "chat.completion"
    assert len(chat["choices"]) == 2
    assert (
        chat["choices"][0]["message"]["content"]
        == bytes(expected_tokens(chat_prompt_ids(messages), 4)).decode()
    )
    assert chat["usage"]["prompt_tokens"] == len(chat_prompt_ids(messages))
    assert b"Inference request(s) failed" in replies["engine-failed"].body


def test_pristine_main_streams_a_chat_answer(baseline):
    if baseline["tree"] != "main":
        pytest.skip("megatron-core 0.19.2's chat endpoint does not stream (main's does)")
    reply = baseline["replies"]["chat-stream"]
    messages = json.loads(STREAM_CASES["chat-stream"].body)["messages"]
    assert reply.content_type.startswith("text/event-stream")
    assert reply.body.endswith(b"data: [DONE]\n\n")
    assert sse_content(reply) == bytes(expected_tokens(chat_prompt_ids(messages), 5)).decode()


def test_pristine_server_keeps_concurrent_requests_apart(baseline):
    cases = concurrent_cases()
    for case, reply in zip(cases, baseline["concurrent"], strict=True):
        assert reply.status == 200, reply.body[:300]
        payload = json.loads(case.body)
        answer = reply.json()
        if "prompt" in payload:
            want = expected_tokens(list(payload["prompt"].encode()), payload["max_tokens"])
            assert answer["choices"][0]["generation_token_ids"] == want
        else:
            want = expected_tokens(chat_prompt_ids(payload["messages"]), payload["max_tokens"])
            assert answer["choices"][0]["message"]["content"] == bytes(want).decode()


def test_pristine_server_survives_a_client_that_goes_away(baseline):
    assert baseline["after_disconnect"].status == 200
    assert without_id(baseline["after_disconnect"]) == without_id(baseline["replies"]["completion"])


# -- the instrumented trees ------------------------------------------------------------------

SERVER_SPANS = {"text_completion", "chat"}
CHILDREN = {
    # a string prompt's tokenization (the other prompt forms are not covered), the wait on the
    # engine, the response's formatting
    "text_completion": {
        "megatron.inference.tokenize",
        "megatron.inference.engine",
        "megatron.inference.format",
    },
    # the chat template rendered and tokenized, the wait on the engine, the response's formatting
    "chat": {
        "megatron.inference.chat_template",
        "megatron.inference.chat_engine",
        "megatron.inference.chat_format",
    },
}
RUNS = {"off": None, "default": "default", "all": "all"}


@pytest.fixture(scope="session")
def instrumented_tree(pristine_tree, fork_root, tmp_path_factory) -> tuple[str, Path]:
    """The specs applied: the fork of 0.19.2, or main in replace mode (#6438 taken out)."""
    name, _root = pristine_tree
    if name == "0.19.2":
        return name, fork_root
    from tests.megatron_cpu.main_tree import instrument

    return name, instrument(snapshot("with"), tmp_path_factory.mktemp("serve-main") / "tree", replace=True)


@pytest.fixture(scope="session")
def instrumented(instrumented_tree, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """``exercise`` on the instrumented tree with telemetry off, the default preset and all."""
    name, root = instrumented_tree
    runs = {}
    for run, groups in RUNS.items():
        env = None if groups is None else {"MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_SPAN_GROUPS": groups}
        runs[run] = serve(root, tmp_path_factory.mktemp(f"serve-{name}-{run}"), name, env)
        runs[run]["tree"] = name
    return runs


def by_trace(spans: list[CapturedSpan], n: int) -> list[CapturedSpan]:
    return [s for s in spans if int(s.trace_id, 16) == n]


def test_telemetry_off_answers_byte_for_byte_as_the_pristine_server(baseline, instrumented):
    off = instrumented["off"]
    for case, reply in baseline["replies"].items():
        assert off["replies"][case] == reply, case
    assert off["after_disconnect"] == baseline["after_disconnect"]
    for mine, theirs in zip(off["concurrent"], baseline["concurrent"], strict=True):
        # 0.19.2 counts its response ids (uuid4) in arrival order, which concurrency shuffles
        assert (without_id(mine) if baseline["tree"] == "0.19.2" else mine.body) == (
            without_id(theirs) if baseline["tree"] == "0.19.2" else theirs.body
        )
        assert (mine.status, mine.content_type) == (theirs.status, theirs.content_type)
    assert off["spans"] == [] and off["metrics"] == []


@pytest.mark.parametrize("run", ["default", "all"])
def test_telemetry_on_answers_as_the_pristine_server(baseline, instrumented, run):
    replies = instrumented[run]["replies"]
    assert {case: r for case, r in replies.items()} == baseline["replies"]


def test_32_concurrent_requests_are_32_server_spans_each_with_its_own_children(instrumented):
    spans = instrumented["all"]["spans"]
    for i, case in enumerate(concurrent_cases()):
        payload = json.loads(case.body)
        trace = by_trace(spans, CONCURRENT_TRACE + i)
        servers = [s for s in trace if s.name in SERVER_SPANS]
        assert len(servers) == 1, (i, [s.name for s in trace])
        (server,) = servers
        assert int(server.parent_id, 16) == CONCURRENT_TRACE + i  # the client's span
        children = [s for s in trace if s is not server]
        assert all(s.parent_id == server.span_id for s in children)
        assert {s.name for s in children} == CHILDREN[server.name] and len(children) == 3
        (formatting,) = [s for s in children if s.name.endswith("format")]
        (engine,) = [s for s in children if s.name.endswith("engine")]
        assert formatting.start_ns >= engine.end_ns
        assert formatting.status != "ERROR"
        attrs = server.attributes
        prompt = (
            chat_prompt_ids(payload["messages"])
            if "messages" in payload
            else list(payload["prompt"].encode())
        )
        assert attrs["gen_ai.operation.name"] == ("chat" if "messages" in payload else "text_completion")
        assert attrs["gen_ai.provider.name"] == "megatron"
        assert attrs["gen_ai.request.max_tokens"] == payload["max_tokens"]
        assert attrs["gen_ai.usage.input_tokens"] == len(prompt)
        assert attrs["gen_ai.usage.output_tokens"] == payload["max_tokens"]
        assert attrs["gen_ai.response.finish_reasons"] == ["length"]
        assert "error.type" not in attrs
    # every child of a request's span is in that request's trace: none parented across requests
    ids = {s.span_id: s for s in spans}
    for span in spans:
        parent = ids.get(span.parent_id or "")
        assert parent is None or parent.trace_id == span.trace_id


def test_request_attributes_and_the_response(instrumented, baseline):
    spans = instrumented["all"]["spans"]
    (server,) = [s for s in by_trace(spans, CASE_TRACE["completion-batch"]) if s.name in SERVER_SPANS]
    assert server.name == "text_completion"
    attrs = server.attributes
    assert (attrs["gen_ai.request.top_p"], attrs["gen_ai.request.top_k"]) == (0.9, 5.0)
    assert attrs["gen_ai.response.finish_reasons"] == ["length"] * 3
    assert attrs["gen_ai.usage.output_tokens"] == 12
    (chat,) = [s for s in by_trace(spans, CASE_TRACE["chat-unversioned"]) if s.name in SERVER_SPANS]
    assert chat.name == "chat" and chat.attributes["gen_ai.request.choice.count"] == 2
    engine = [
        s
        for s in by_trace(spans, CASE_TRACE["chat-unversioned"])
        if s.name == "megatron.inference.chat_engine"
    ]
    assert [s.attributes["megatron.inference.engine_requests"] for s in engine] == [2]
    response = baseline["replies"]["chat-unversioned"].json()
    if baseline["tree"] == "main":  # main answers with the engine request's uid; 0.19.2 makes its own
        assert chat.attributes["gen_ai.response.id"] == response["id"]


def test_error_paths_set_error_type(instrumented):
    spans = instrumented["all"]["spans"]

    def server(case: str) -> CapturedSpan:
        (found,) = [s for s in by_trace(spans, CASE_TRACE[case]) if s.name in SERVER_SPANS]
        return found

    for case in ("engine-failed", "chat-engine-failed"):
        failed = server(case)
        assert failed.attributes["error.type"] == "500", case
        assert failed.status == "ERROR", case
    bad = server("bad-json")  # Quart raises BadRequest from get_json: the span records it
    assert (bad.status, bad.status_message) == ("ERROR", "BadRequest")
    assert bad.attributes["error.type"] == "400"  # the HTTP status, as on the engine's failures
    assert [e.name for e in bad.events] == ["exception"]
    durations: dict[int, int] = {}
    for metric in instrumented["all"]["metrics"]:
        if metric.name != "gen_ai.server.request.duration":
            continue
        assert metric.kind == "histogram"
        for point in metric.data_points:
            if error := point.attributes.get("error.type"):
                durations[int(error)] = durations.get(int(error), 0) + point.count
    assert durations == {400: 3, 500: 2}


def test_a_client_that_goes_away_ends_its_span_once_marked(instrumented):
    trace = by_trace(instrumented["all"]["spans"], SLOW_TRACE)
    servers = [s for s in trace if s.name in SERVER_SPANS]
    assert len(servers) == 1
    assert servers[0].status == "ERROR"  # cancelled
    assert "Cancel" in servers[0].status_message
    engine = [s for s in trace if s.name == "megatron.inference.engine"]
    assert len(engine) == 1 and engine[0].status == "ERROR"


def test_the_default_preset_keeps_the_server_span_alone(instrumented):
    spans = instrumented["default"]["spans"]
    assert {s.name for s in spans} == SERVER_SPANS
    streamed = streams(instrumented["default"]["tree"])
    # the cases, the 32, the one that went away, one after; main: the streamed ones and the stream
    # the client went away from
    requests = len(CASES) + len(concurrent_cases()) + 2 + (len(streamed) + 1 if streamed else 0)
    assert len(spans) == requests


def test_the_metrics_carry_the_conventions_buckets(instrumented):
    from codegen.otel_runtime._genai import BUCKETS

    metrics = {m.name: m for m in instrumented["all"]["metrics"]}
    assert set(BUCKETS) <= set(metrics)
    for name, bounds in BUCKETS.items():
        points = metrics[name].data_points
        assert metrics[name].kind == "histogram", name
        assert points and all(p.explicit_bounds == tuple(bounds) for p in points), name
    answered = sum(p.count for p in metrics["gen_ai.server.request.duration"].data_points)
    # the ones that went away have no response; a streamed one is answered when its stream ends
    streamed = streams(instrumented["all"]["tree"])
    assert answered == len(CASES) + len(concurrent_cases()) + 1 + len(streamed)


def test_time_to_first_token_per_engine_request_and_per_stream(instrumented):
    """From the engine's events for each answered engine request (n of them for a chat with n
    choices), from the first chunk for a streamed answer (main): one more than without it."""
    metrics = {m.name: m for m in instrumented["all"]["metrics"]}
    assert metrics["gen_ai.server.time_to_first_token"].kind == "histogram"
    points = metrics["gen_ai.server.time_to_first_token"].data_points

    def engine_requests(case: str) -> int:  # a batch of prompts, or n choices
        payload = json.loads(CASES[case].body)
        prompt = payload.get("prompt")
        batch = isinstance(prompt, list) and all(isinstance(p, str) for p in prompt)
        return len(prompt) if batch else payload.get("n", 1)

    answered = [case for case, status in STATUS.items() if status == 200]
    # the cases, the 32 and the one after the disconnect
    expected = sum(map(engine_requests, answered)) + len(concurrent_cases()) + 1
    streamed = streams(instrumented["all"]["tree"])
    assert sum(p.count for p in points) == expected + len(streamed)


def test_a_streamed_chat_span_ends_once_when_its_stream_ends(instrumented):
    if instrumented["all"]["tree"] != "main":
        pytest.skip("megatron-core 0.19.2's chat endpoint does not stream (main's does)")
    spans = instrumented["all"]["spans"]
    trace = by_trace(spans, CASE_TRACE["chat-stream"])
    servers = [s for s in trace if s.name in SERVER_SPANS]
    assert len(servers) == 1, [s.name for s in trace]  # ended once
    (server,) = servers
    assert server.name == "chat" and server.status != "ERROR"
    assert int(server.parent_id, 16) == CASE_TRACE["chat-stream"]
    assert server.attributes["gen_ai.request.stream"] is True
    assert server.attributes["gen_ai.operation.name"] == "chat"
    # the template rendered under it; no engine wait (the stream is the wait), the span outlives it
    (template,) = [s for s in trace if s is not server]
    assert template.name == "megatron.inference.chat_template"
    assert template.parent_id == server.span_id
    assert server.end_ns > template.end_ns
    # the client that went away from a stream: its span ends once, marked
    gone = [s for s in by_trace(spans, STREAM_SLOW_TRACE) if s.name in SERVER_SPANS]
    assert len(gone) == 1 and gone[0].status == "ERROR", gone


# Spans of the serving groups no CPU run reaches, each with what blocks it (as test_pretrain_cpu.py's
# UNREACHABLE_ON_CPU): the dynamic engine's step (specs/inference_engine.yaml)
NEEDS_CUDA = {
    "megatron.inference.step": "the engine's DynamicInferenceContext allocates its KV cache on the "
    "GPU and its forward runs the model there; the stand-in engine here answers without stepping "
    "(tests/target checks the placement, benchmarks/engine_step.py runs the step code on CPU)",
}


@pytest.mark.parametrize("run", ["default", "all"])
def test_the_capture_passes_codegen_verify(instrumented, run, tmp_path):
    capture = tmp_path / "capture.jsonl"  # the spans alone
    lines = instrumented[run]["capture"].read_text().splitlines(keepends=True)
    capture.write_text("".join(line for line in lines if line.startswith('{"resourceSpans"')))
    groups = "inference" if run == "default" else "inference,inference_steps"
    command = [
        sys.executable,
        "-m",
        "codegen",
        "verify",
        str(REPO / "specs"),
        str(capture),
        "--groups",
        groups,
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    # the dynamic engine's step (inference_steps too) needs CUDA to run: the only span never seen
    findings = [line for line in result.stdout.splitlines() if line.startswith("finding: ")]
    unseen = [
        f"finding: span '{name}' (group inference_steps) is documented but was never seen"
        for name in NEEDS_CUDA
    ]
    assert findings == (unseen if run == "all" else []), result.stdout + result.stderr
    assert result.returncode == (1 if findings else 0), result.stdout + result.stderr
