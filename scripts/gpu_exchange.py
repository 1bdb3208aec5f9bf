"""GPU frames across processes and libraries: a writer process publishes frames it made with
one GPU library (torch or CuPy) to a framebus device stream; a reader process in lossless mode
takes every frame with the other library; both compute a checksum of every frame on the GPU,
and the two lists must be equal. Runs torch -> CuPy and CuPy -> torch, for uint8 and float32
frames, and alternates the ways in (``write`` of the library's array, a ``loan`` filled through
DLPack / ``__cuda_array_interface__``) and out (``wait_view`` zero-copy, ``read_new`` copy).

Usage (on a machine with a CUDA GPU, torch and CuPy): python scripts/gpu_exchange.py [--frames N]
(``--fake``: NumPy on both sides behind framebus's fake CUDA door, to check the script itself.)
Exit status 0 when every checksum matched, 1 when one did not or a process failed; it prints
"skipped: ..." and exits 0 where there is no GPU, torch or CuPy.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
import queue
import sys
import uuid
from typing import Any, List, Tuple

DEVICE = 0
CASES: List[Tuple[Tuple[int, ...], str]] = [((480, 640, 3), "uint8"), ((256, 384), "float32")]
TIMEOUT = 60.0


class Lib:
    """The few operations the exchange needs, in torch or CuPy, on a non-default CUDA stream;
    "host" is NumPy behind framebus's fake door (FRAMEBUS_CUDA=fake, whose "device" memory is
    host memory), to check the exchange itself on a machine without a GPU."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "host":
            import numpy

            self.m = numpy
            self.stream = None
        elif name == "torch":
            import torch

            self.m = torch
            torch.cuda.set_device(DEVICE)
            self.s = torch.cuda.Stream(f"cuda:{DEVICE}")
            torch.cuda.set_stream(self.s)
            self.stream = int(self.s.cuda_stream)
        else:
            import cupy

            self.m = cupy
            cupy.cuda.Device(DEVICE).use()
            self.s = cupy.cuda.Stream(non_blocking=True)
            self.s.use()
            self.stream = int(self.s.ptr)

    def frame(self, shape: Tuple[int, ...], dtype: str, seed: int) -> Any:
        """Content that depends on ``seed`` and on the position (made on the GPU)."""
        n = 1
        for d in shape:
            n *= d
        if self.name == "host":
            np = self.m
            return ((np.arange(n, dtype=np.int64) * 2654435761 + seed * 40503) % 251).astype(dtype).reshape(shape)
        if self.name == "torch":
            torch = self.m
            i = torch.arange(n, device=f"cuda:{DEVICE}", dtype=torch.int64)
            x = (i * 2654435761 + seed * 40503) % 251
            return x.to(getattr(torch, dtype)).reshape(shape)
        cp = self.m
        i = cp.arange(n, dtype=cp.int64)
        x = (i * 2654435761 + seed * 40503) % 251
        return x.astype(dtype).reshape(shape)

    def wrap(self, x: Any) -> Any:
        if self.name == "host":
            return x  # framebus's own object: the checksum reads its bytes, a loan is written by address
        return self.m.from_dlpack(x) if self.name == "torch" else self.m.asarray(x)

    def checksum(self, x: Any) -> Tuple[float, float]:
        """(sum, position-weighted sum) in float64: a swapped, shifted or torn frame changes
        the second."""
        m = self.m
        if self.name == "host":
            if not isinstance(x, m.ndarray):
                from framebus import _native

                x = m.frombuffer(_native.fake_cuda_read(x.ptr, x.nbytes), dtype=x.dtype)
            flat = x.reshape(-1).astype(m.float64)
            w = (m.arange(flat.size, dtype=m.float64) % 1021) + 1
            return float(flat.sum()), float((flat * w).sum())
        if self.name == "torch":
            flat = x.reshape(-1).to(m.float64)
            w = (m.arange(flat.numel(), device=flat.device, dtype=m.float64) % 1021) + 1
            return float(flat.sum().item()), float((flat * w).sum().item())
        flat = x.reshape(-1).astype(m.float64)
        w = (m.arange(flat.size, dtype=m.float64) % 1021) + 1
        return float(flat.sum().get()), float((flat * w).sum().get())

    def copy_into(self, dst: Any, src: Any) -> None:
        if self.name == "host":
            import ctypes

            src = self.m.ascontiguousarray(src)
            ctypes.memmove(dst.ptr, src.ctypes.data, src.nbytes)
        elif self.name == "torch":
            dst.copy_(src)
        else:
            dst[...] = src


def writer(lib_name: str, name: str, shape: Tuple[int, ...], dtype: str, frames: int, ready: Any, finished: Any, results: Any) -> None:
    try:
        import framebus

        lib = Lib(lib_name)
        sums = []
        with framebus.create(name, shape=shape, dtype=dtype, slots=4, device=f"cuda:{DEVICE}") as s:
            results.put("created")
            if not ready.wait(TIMEOUT):
                raise RuntimeError("the reader did not attach")
            for i in range(frames):
                x = lib.frame(shape, dtype, i)
                sums.append(lib.checksum(x))
                if i % 2 == 0:
                    s.write(x, stream=lib.stream, frame_id=i, timeout=TIMEOUT)
                else:
                    with s.loan(stream=lib.stream, timeout=TIMEOUT) as a:
                        lib.copy_into(lib.wrap(a), x)
            results.put({"sums": sums})
            # Keep the stream (and its device memory) until the reader is done with it.
            finished.wait(TIMEOUT)
            s.unlink()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put({"error": f"writer ({lib_name}): {type(exc).__name__}: {exc}"})


def reader(lib_name: str, name: str, frames: int, ready: Any, results: Any) -> None:
    try:
        import framebus

        lib = Lib(lib_name)
        sums = []
        r = framebus.open(name, mode="lossless")
        ready.set()
        for i in range(frames):
            if i % 2 == 0:
                with r.wait_view(timeout=TIMEOUT, stream=lib.stream) as f:
                    sums.append(lib.checksum(lib.wrap(f)))
            else:
                sums.append(lib.checksum(lib.wrap(r.read_new(timeout=TIMEOUT, stream=lib.stream))))
        r.close()
        results.put({"sums": sums})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put({"error": f"reader ({lib_name}): {type(exc).__name__}: {exc}"})


def _get(q: Any, what: str) -> Any:
    try:
        msg = q.get(timeout=TIMEOUT * 2)
    except queue.Empty:
        raise RuntimeError(f"no answer from the {what} within {TIMEOUT * 2:.0f} s") from None
    if isinstance(msg, dict) and msg.get("error"):
        raise RuntimeError(msg["error"])
    return msg


def exchange(src: str, dst: str, shape: Tuple[int, ...], dtype: str, frames: int) -> bool:
    ctx = mp.get_context("spawn")
    name = f"gpu-exchange-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ready, finished = ctx.Event(), ctx.Event()
    wq, rq = ctx.Queue(), ctx.Queue()
    w = ctx.Process(target=writer, args=(src, name, shape, dtype, frames, ready, finished, wq), daemon=True)
    w.start()
    procs = [w]
    try:
        _get(wq, "writer")  # created
        r = ctx.Process(target=reader, args=(dst, name, frames, ready, rq), daemon=True)
        r.start()
        procs.append(r)
        wrote = _get(wq, "writer")["sums"]
        got = _get(rq, "reader")["sums"]
        finished.set()  # the writer may unlink now
        bad = [i for i, (a, b) in enumerate(zip(wrote, got)) if a != b]
        ok = len(wrote) == len(got) == frames and not bad
        print(f"{src} -> {dst}, {dtype} {shape}: {len(got)}/{frames} frames, " + ("checksums equal" if ok else f"MISMATCH at frames {bad[:10]} (wrote {wrote[bad[0]] if bad else '-'}, read {got[bad[0]] if bad else '-'})"))
        return ok
    except RuntimeError as exc:
        print(f"{src} -> {dst}, {dtype} {shape}: FAILED: {exc}")
        return False
    finally:
        ready.set()
        finished.set()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(2)
        try:
            import framebus

            framebus.unlink(name)
        except Exception:  # noqa: BLE001 - already gone (the writer unlinked it)
            pass


def missing() -> str:
    for module in ("torch", "cupy"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    import framebus

    info = framebus.gpu_info() if hasattr(framebus, "gpu_info") else {}
    if info.get("door") != "cuda" or not info.get("devices"):
        return f"framebus has no GPU streams on the CUDA driver here ({info.get('error') or 'door ' + str(info.get('door'))})"
    return ""


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=24, help="frames per exchange (default 24)")
    p.add_argument("--fake", action="store_true", help="NumPy on both sides behind framebus's fake door (sets FRAMEBUS_CUDA=fake): checks the exchange without a GPU")
    args = p.parse_args(argv)
    if args.fake:
        os.environ["FRAMEBUS_CUDA"] = "fake"
        pairs = [("host", "host")]
    else:
        why = missing()
        if why:
            print(f"skipped: {why}")
            return 0
        pairs = [("torch", "cupy"), ("cupy", "torch")]
    ok = True
    for shape, dtype in CASES:
        for src, dst in pairs:
            ok = exchange(src, dst, shape, dtype, args.frames) and ok
    print("all exchanges matched" if ok else "SOME EXCHANGES FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
