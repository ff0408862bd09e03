"""A coroutine's spans end when it returns, raises or is cancelled, exactly once, whatever
awaits they cover; the instrumented coroutine answers as the pristine one."""

import asyncio


class _Client:
    def __init__(self, hang=False):
        self.hang = hang

    async def add_request(self, tokens):
        await asyncio.sleep(3600 if self.hang else 0)
        if tokens == ["boom"]:
            raise ValueError("engine failed")
        return len(tokens)


async def _run(module):
    out = [await module.completions({"prompts": ["a b", "c"]}, _Client())]
    out.append(await module.completions({"prompts": []}, _Client()))
    try:
        await module.completions({"prompts": ["boom"]}, _Client())
    except ValueError as error:
        out.append(str(error))
    task = asyncio.ensure_future(module.completions({"prompts": ["x"]}, _Client(hang=True)))
    await asyncio.sleep(0.01)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        out.append("cancelled")
    return out


def check(before, after, otel, exporter):
    assert asyncio.run(_run(after)) == asyncio.run(_run(before)) == [
        ({"choices": [2, 1]}, 200),
        ("no prompt", 400),
        "engine failed",
        "cancelled",
    ]
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    # four requests, three of which reached the engine; each span ended once
    assert sorted(names) == ["demo.engine"] * 3 + ["demo.request"] * 4, names
    assert len({s.context.span_id for s in spans}) == len(spans)
    by_id = {s.context.span_id: s for s in spans}
    for span in spans:
        if span.name == "demo.engine":
            assert by_id[span.parent.span_id].name == "demo.request"
    errors = [(s.name, s.status.status_code.name, s.status.description) for s in spans if not s.status.is_ok]
    assert sorted(errors) == [
        ("demo.engine", "ERROR", "CancelledError"),
        ("demo.engine", "ERROR", "ValueError"),
        ("demo.request", "ERROR", "CancelledError"),
        ("demo.request", "ERROR", "ValueError"),
    ], errors
    ok = [s for s in spans if s.name == "demo.request" and s.status.is_ok]
    # end attributes are set before the final return (the early one returns without them)
    assert sorted(str(s.attributes.get("demo.choices")) for s in ok) == ["2", "None"]
