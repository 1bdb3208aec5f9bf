"""asyncio: read_new_async, wait_view_async, async for, timeouts and cancellation."""

from __future__ import annotations

import asyncio
import itertools
import os

import numpy as np
import pytest

import framebus

_ids = itertools.count()


@pytest.fixture
def name():
    n = f"aio-{os.getpid()}-{next(_ids)}"
    yield n
    try:
        framebus.unlink(n)
    except FileNotFoundError:
        pass


def test_async_for_receives_every_frame_in_lossless_mode(name):
    async def main():
        w = framebus.create(name, shape=(2,), dtype=np.int64)
        r = framebus.open(name, mode="lossless")

        async def produce():
            for i in range(20):
                await asyncio.sleep(0.002)
                w.write(np.array([i, i]), timeout=5)

        task = asyncio.create_task(produce())
        got = []
        async for frame in r:
            got.append(int(frame.array[0]))
            if len(got) == 20:
                break
        await task
        r.close()
        w.close()
        return got

    assert asyncio.run(main()) == list(range(20))


def test_read_new_async_times_out_and_cancellation_consumes_nothing(name):
    async def main():
        w = framebus.create(name, shape=(2,), dtype=np.int64)
        r = framebus.open(name, mode="lossless")
        with pytest.raises(TimeoutError):
            await r.read_new_async(timeout=0.05)
        pending = asyncio.create_task(r.read_new_async())
        await asyncio.sleep(0.02)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        w.write(np.array([7, 7]))
        first = await r.read_new_async(timeout=5)
        w.write(np.array([8, 8]))
        with await r.wait_view_async(timeout=5) as f:
            second = f.array.tolist()
        r.close()
        w.close()
        return first.tolist(), second

    assert asyncio.run(main()) == ([7, 7], [8, 8])


def test_awaiters_on_several_handles_all_wake(name):
    async def main():
        w = framebus.create(name, shape=(2,), dtype=np.int64)
        readers = [framebus.open(name) for _ in range(6)]
        tasks = [asyncio.create_task(r.read_new_async(timeout=5)) for r in readers]
        await asyncio.sleep(0.02)
        w.write(np.array([1, 2]))
        results = await asyncio.gather(*tasks)
        for r in readers:
            r.close()
        w.close()
        return [x.tolist() for x in results]

    assert asyncio.run(main()) == [[1, 2]] * 6
