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
from pathlib import Path

import pytest

for _module, _why in (
    ("torch", "megatron-core's inference modules import torch (tox -e runtime installs it)"),
    ("quart", "the server is a Quart app (the 'serving' extra; tox -e runtime installs it)"),
    ("hypercorn", "the server runs on hypercorn (the 'serving' extra)"),
    ("zmq", "the InferenceClient talks ZMQ (pyzmq, the 'serving' extra)"),
    ("msgpack", "the InferenceClient's records are msgpack (the 'serving' extra)"),
):
    pytest.importorskip(_module, reason=_why)

from tests.megatron_cpu.serving import CASES, SLOW_CASE, Reply, Server, concurrent_cases, without_id
from tests.upstream_main import snapshot

pytestmark = pytest.mark.slow

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


@pytest.fixture(scope="session")
def baseline(pristine_tree, tmp_path_factory) -> dict[str, object]:
    """Every case, the 32 concurrent requests and a client that goes away, on the pristine tree."""
    name, root = pristine_tree
    out = tmp_path_factory.mktemp(f"serve-pristine-{name}")
    with Server(root, out) as server:
        replies = {case: server.post(CASES[case]) for case in CASES}
        concurrent = server.post_many(concurrent_cases())
        server.disconnect(SLOW_CASE)
        after = server.post(CASES["completion"])
    return {
        "tree": name,
        "replies": replies,
        "concurrent": concurrent,
        "after_disconnect": after,
        "log": server.output(),
    }


def test_pristine_server_answers_each_case(baseline):
    replies: dict[str, Reply] = baseline["replies"]
    assert {case: reply.status for case, reply in replies.items()} == STATUS
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
