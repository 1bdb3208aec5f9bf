"""What a ring's second slot costs a lock-step ping-pong: the W3 limit (a futex wake/wait and one
np.copyto each way, two processes) with one shared 1080p buffer against two buffers used in turn,
as a ring that never rewrites its newest frame does. Rounds interleave the two.

    python benches/w3_two_buffers.py
"""
import mmap
import os
import sys
import time
import statistics
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from framebus_bench.transport.shm import Futex

N = 1920 * 1080 * 3
def run(nbuf, rounds=600):
    m = mmap.mmap(-1, 4096 + nbuf * N)
    words = np.frombuffer(m, np.uint32, count=4)
    bufs = [np.frombuffer(m, np.uint8, count=N, offset=4096 + i * N) for i in range(nbuf)]
    base = words.ctypes.data
    pid = os.fork()
    fx = Futex()
    if pid == 0:
        out = np.empty(N, np.uint8); last = 0
        while True:
            while int(words[0]) == last:
                fx.wait(base, last, 0.1)
            last = int(words[0])
            if last == 0xFFFFFFFF: os._exit(0)
            np.copyto(out, bufs[last % nbuf])
            words[1] = last; fx.wake(base + 4)
    src = np.ones(N, np.uint8); times = []
    for i in range(1, rounds + 1):
        t = time.perf_counter_ns()
        np.copyto(bufs[i % nbuf], src)
        words[0] = i; fx.wake(base)
        while int(words[1]) != i:
            fx.wait(base + 4, int(words[1]), 0.1)
        times.append(time.perf_counter_ns() - t)
    words[0] = 0xFFFFFFFF; fx.wake(base); os.waitpid(pid, 0)
    t = times[100:]
    return 1e9 / statistics.mean(t), statistics.median(t) / 1e3

for r in range(3):
    for nbuf in (1, 2, 1, 2):
        rt, p50 = run(nbuf)
        print(f"round {r} buffers {nbuf}: {rt:,.0f} round trips/s, p50 {p50:.0f} us", flush=True)
