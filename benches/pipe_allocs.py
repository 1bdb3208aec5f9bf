"""Allocator calls per ``framebus.pipe()`` in steady state (W8, pipe row).

Builds a tiny LD_PRELOAD malloc counter with the C compiler, re-runs itself under it with
PYTHONMALLOC=malloc (so Python's own allocations go through malloc and are counted too), and
counts every malloc/calloc/realloc/posix_memalign/aligned_alloc/memalign of the whole process
(the writer thread included) across N pipe() calls after a warm-up, minus the same loop
without the pipe() call. Run: ``python benches/pipe_allocs.py [N]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdatomic.h>
static atomic_long count;
long fb_alloc_count(void) { return atomic_load(&count); }
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
/* dlsym itself may call calloc: serve it from a static arena. */
static char arena[4096]; static size_t used;
static void *bump(size_t n) { n = (n + 15) & ~15UL; if (used + n > sizeof arena) return NULL; void *p = arena + used; used += n; return p; }
static int loading;
static void init(void) {
  if (real_malloc || loading) return;
  loading = 1;
  real_malloc = dlsym(RTLD_NEXT, "malloc"); real_calloc = dlsym(RTLD_NEXT, "calloc");
  real_realloc = dlsym(RTLD_NEXT, "realloc"); real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc"); real_memalign = dlsym(RTLD_NEXT, "memalign");
  loading = 0;
}
void *malloc(size_t n) { init(); if (!real_malloc) return bump(n); atomic_fetch_add(&count, 1); return real_malloc(n); }
void *calloc(size_t a, size_t b) { init(); if (!real_calloc) { char *p = bump(a * b); return p; } atomic_fetch_add(&count, 1); return real_calloc(a, b); }
void *realloc(void *p, size_t n) { init(); atomic_fetch_add(&count, 1); return real_realloc(p, n); }
int posix_memalign(void **p, size_t a, size_t n) { init(); atomic_fetch_add(&count, 1); return real_posix_memalign(p, a, n); }
void *aligned_alloc(size_t a, size_t n) { init(); atomic_fetch_add(&count, 1); return real_aligned_alloc(a, n); }
void *memalign(size_t a, size_t n) { init(); atomic_fetch_add(&count, 1); return real_memalign(a, n); }
void free(void *p) { static void (*real_free)(void *); if ((char *)p >= arena && (char *)p < arena + sizeof arena) return;
  if (!real_free) real_free = dlsym(RTLD_NEXT, "free"); real_free(p); }
"""


def build_shim() -> str:
    d = tempfile.mkdtemp(prefix="framebus-alloc-")
    src, lib = os.path.join(d, "count.c"), os.path.join(d, "libcount.so")
    with open(src, "w") as f:
        f.write(SHIM)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, src, "-ldl"], check=True)
    return lib


def measure(n: int) -> None:
    import ctypes

    import numpy as np

    import framebus

    count = ctypes.CDLL(None).fb_alloc_count
    count.restype = ctypes.c_long
    # The reader is another process (cat), so its reads are not counted here.
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert cat.stdin is not None
    w = cat.stdin.fileno()
    results = {}
    for label, frames in (
        ("1080p RGB ndarray", [np.full((1080, 1920, 3), i, np.uint8) for i in range(4)]),
        ("64 KiB bytes", [bytes([i]) * 65536 for i in range(4)]),
        ("memoryview", [memoryview(bytearray([i]) * 300_000) for i in range(4)]),
    ):
        pipe = framebus.pipe
        for i in range(200):  # warm-up: writer thread started, queue allocated, caches filled
            pipe(frames[i % 4], w)
        framebus.sync(w)

        def loop(k: int, call: bool) -> int:
            before = count()
            for i in range(k):
                if call:
                    pipe(frames[i & 3], w)
                else:
                    frames[i & 3]
            return count() - before

        base = loop(n, False)
        got = loop(n, True)
        framebus.sync(w)
        results[label] = (got - base) / n
    framebus.pipes.close(w)
    cat.stdin.close()
    cat.wait()
    for label, per in results.items():
        print(f"{label:>20}: {per:.3f} allocator calls per pipe() over {n} calls")


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    if os.environ.get("_FRAMEBUS_ALLOC_CHILD"):
        measure(n)
        return 0
    env = dict(os.environ, LD_PRELOAD=build_shim(), PYTHONMALLOC="malloc", _FRAMEBUS_ALLOC_CHILD="1")
    return subprocess.run([sys.executable, __file__, str(n)], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
