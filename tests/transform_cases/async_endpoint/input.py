import asyncio


class Blueprint:
    def route(self, path, methods):
        def register(func):
            return func

        return register


bp = Blueprint()
tokenize = str.split

try:

    @bp.route('/completions', methods=['POST'])
    @bp.route('/v1/completions', methods=['POST'])
    async def completions(req, client):
        """Handle one request."""
        prompts = [tokenize(p) for p in req["prompts"]]
        if not prompts:
            return "no prompt", 400

        tasks = [client.add_request(p) for p in prompts]
        # the engine
        results = await asyncio.gather(*tasks)
        await asyncio.sleep(0)
        return {"choices": results}, 200

except ImportError:
    pass
