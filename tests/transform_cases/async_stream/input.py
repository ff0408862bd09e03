import asyncio


class Response:
    def __init__(self, body, content_type="application/json", status=200):
        self.body = body
        self.content_type = content_type
        self.status = status


async def openai_stream(streams, tokenizer, *, chat, include_usage=False):
    for stream in streams:
        async for tokens in stream:
            yield f"data: {tokenizer(tokens)}\n\n"
    yield "data: [DONE]\n\n"


class Client:
    async def add_request(self, prompt):
        await asyncio.sleep(0)
        return prompt.upper()

    async def add_request_streaming(self, prompt):
        for word in prompt.split():
            await asyncio.sleep(0)
            yield word


try:

    async def chat_completions(req, client):
        """Answer, streamed or not."""
        n = req.get("n", 1)
        if req.get("stream", False):
            streams = [client.add_request_streaming(req["prompt"]) for _ in range(n)]
            include_usage = bool((req.get("stream_options") or {}).get("include_usage", False))
            response = Response(
                openai_stream(
                    streams,
                    str.upper,
                    chat=True,
                    include_usage=include_usage,
                ),
                content_type="text/event-stream",
            )
            response.timeout = None
            return response

        tasks = [client.add_request(req["prompt"]) for _ in range(n)]
        batch_results = await asyncio.gather(*tasks)
        return Response(batch_results)

    async def completions(req, client):
        streams = [client.add_request_streaming(req["prompt"])]
        return Response(openai_stream(streams, str.lower, chat=False), content_type="text/event-stream")

    def sync_lines(path):
        lines = open(path).read().splitlines()
        return iter(lines)

except ImportError:
    pass
