from concurrent.futures import ThreadPoolExecutor

import megatron.otel as _otel


class Builder:
    def build(self, items):
        def helper(executor):
            futures = []
            for item in items:
                futures.append(
                    executor.submit(
                        _otel.in_context(self._build_one),
                        item,  # a comment inside the call survives
                    )
                )
            return futures

        with ThreadPoolExecutor() as executor:
            return helper(executor)


def finalize(queue, blocking):
    if queue is not None:
        _otel.stamp(
            "nvrx.call_idx",
            queue.maybe_finalize_async_calls_with_a_long_name(blocking, no_dist=False),
        )  # trailing
