"""The decorator form on a coroutine: the route decorators register the traced coroutine function
(awaited, not run in a thread), whose span covers the handler's run and, streamed, its stream."""

import asyncio


async def _run(module):
    out = []
    for req in ({"prompt": "a b"}, {"prompt": "c d", "stream": True}):
        response = await module.chat_completions(req)
        body = response["body"]
        if hasattr(body, "__aiter__"):
            body = [chunk async for chunk in body]
        out.append((response["content_type"], body))
    return out


def check(before, after, otel, exporter):
    assert asyncio.iscoroutinefunction(after.chat_completions)
    assert asyncio.run(_run(after)) == asyncio.run(_run(before)) == [
        ("application/json", ["a", "b"]),
        ("text/event-stream", ["data: c\n\n", "data: d\n\n"]),
    ]
    spans = exporter.get_finished_spans()
    assert [(s.name, s.status.status_code.name) for s in spans] == [("demo.chat", "UNSET")] * 2
