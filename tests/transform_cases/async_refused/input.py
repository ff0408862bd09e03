import asyncio


async def chunks(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield i


def handler(x):
    return iter(x)


async def flat(x):
    y = x + 1
    async with x.lock:
        y += 1
    return y
