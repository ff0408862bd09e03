import asyncio

import megatron.otel as _otel


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
        _otel_span = _otel.STEP and _otel.start_span(
            "demo.request", lambda: {"demo.prompts": len(req["prompts"])}
        )
        try:
            prompts = [tokenize(p) for p in req["prompts"]]
            if not prompts:
                return "no prompt", 400

            tasks = [client.add_request(p) for p in prompts]
            # the engine
            _otel_span_2 = _otel.LAYER and _otel.start_span("demo.engine")
            try:
                results = await asyncio.gather(*tasks)
            finally:
                _otel_span_2 and _otel_span_2.end()
            await asyncio.sleep(0)
            _otel_span and _otel_span.set_attributes(lambda: {"demo.choices": len(prompts)})
            return {"choices": results}, 200
        finally:
            _otel_span and _otel_span.end()

except ImportError:
    pass
