import asyncio


class Blueprint:
    def route(self, path, methods):
        return lambda func: func


bp = Blueprint()


async def openai_stream(words):
    for word in words:
        await asyncio.sleep(0)
        yield f"data: {word}\n\n"


try:

    @bp.route('/chat/completions', methods=['POST'])
    @bp.route('/v1/chat/completions', methods=['POST'])
    async def chat_completions(req):
        """A long handler: the decorator form leaves its body where it is."""
        words = req["prompt"].split()
        if req.get("stream", False):
            response = {
                "body": openai_stream(
                    words,
                ),
                "content_type": "text/event-stream",
            }
            return response
        await asyncio.sleep(0)
        return {"body": words, "content_type": "application/json"}

except ImportError:
    pass
