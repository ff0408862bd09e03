"""A streamed response's span ends when its stream ends, after the handler returned; the
non-streamed branch ends its span on return; the responses are the pristine module's."""

import asyncio


async def _drain(body):
    if hasattr(body, "__aiter__"):
        return [chunk async for chunk in body]
    return list(body)


async def _run(module):
    client = module.Client()
    streamed = await module.chat_completions({"prompt": "a b", "stream": True, "n": 2}, client)
    plain = await module.chat_completions({"prompt": "a b"}, client)
    other = await module.completions({"prompt": "C D"}, client)
    closed = await module.completions({"prompt": "E F"}, client)
    first = await closed.body.__anext__()
    await closed.body.aclose()
    return [
        (streamed.content_type, await _drain(streamed.body)),
        (plain.content_type, plain.body),
        await _drain(other.body),
        first,
    ]


def check(before, after, otel, exporter):
    assert asyncio.run(_run(after)) == asyncio.run(_run(before)) == [
        ("text/event-stream", ["data: A\n\n", "data: B\n\n"] * 2 + ["data: [DONE]\n\n"]),
        ("application/json", ["A B"]),
        ["data: c\n\n", "data: d\n\n", "data: [DONE]\n\n"],
        "data: e\n\n",
    ]
    spans = exporter.get_finished_spans()
    outcomes = sorted((s.name, s.status.status_code.name, s.status.description or "") for s in spans)
    assert outcomes == [
        ("demo.chat", "UNSET", ""),
        ("demo.chat", "UNSET", ""),
        ("demo.completions", "ERROR", "stream closed before its end"),
        ("demo.completions", "UNSET", ""),
        ("demo.engine", "UNSET", ""),
    ], outcomes
