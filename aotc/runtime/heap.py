"""glibc's heap kept between calls of a compiled graph on CPU.

An AOTInductor package allocates its buffers afresh on every call and frees them at its
end. With glibc's default thresholds, a buffer over M_MMAP_THRESHOLD gets a fresh mmap and
a free top of the heap over M_TRIM_THRESHOLD goes back to the kernel, so the next call
faults every page in again and the kernel zeroes it. Measured on the benchmark suite's
gpt2 AdamW step (131 MiB of buffers per call, 1 thread): 258 ms a step, 668k page faults
over 18 steps; with the heap kept, 214 ms and 211k. Eager frees as it goes and loses 3%
(232 ms against 226).

So the first CPU package aotc loads sets M_MMAP_THRESHOLD to glibc's largest (32 MiB) and
M_TRIM_THRESHOLD to 1 GiB: memory a call freed stays in the process for the next, as
PyTorch's CUDA caching allocator keeps it on a GPU. The process's resident size stays at
its peak (up to 1 GiB more) instead of dropping between calls. Not on a libc other than
glibc, nor where the environment already tunes malloc (MALLOC_*_ variables,
glibc.malloc tunables, jemalloc, tcmalloc or mimalloc in LD_PRELOAD); AOTC_KEEP_HEAP=0 turns it off.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 2**30
_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")
_ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_state: str | None = None  # what keep() found: "kept", or why it left malloc alone


def keep() -> str:
    """Keep freed memory in the process (see the module docstring), once per process;
    returns "kept" or why not."""
    global _state
    if _state is None:
        _state = _keep()
    return _state


def _keep() -> str:
    if os.environ.get("AOTC_KEEP_HEAP") == "0":
        return "off: AOTC_KEEP_HEAP=0"
    if not _glibc_version():
        return "off: not glibc"
    tuned = [v for v in _ENVIRONMENT if v in os.environ]
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        tuned.append("GLIBC_TUNABLES")
    if any(a in os.environ.get("LD_PRELOAD", "") for a in _ALLOCATORS):
        tuned.append("LD_PRELOAD")
    if tuned:
        return f"off: the environment sets {', '.join(tuned)}"
    libc = ctypes.CDLL(None)
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if not (libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "off: mallopt refused"
    return "kept"


def _glibc_version() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return ""
