"""What the process's malloc does with the memory torch frees, set for a training loop.

A training step frees and allocates the same few hundred MB every step: the forward's saved
activations, the gradients (`zero_grad(set_to_none=True)` frees them all), the optimizer's
temporaries. glibc's malloc hands most of it back to the kernel: blocks of 128 KB and more are
mapped per allocation until its adaptive threshold catches up, and the top of the heap is
trimmed whenever more than twice that threshold lies free there, which the step's pattern (all
gradients freed at once) causes every step. The next step faults the same memory in again, 4 KB
at a time, and on a virtual machine a fault costs about a microsecond: GPT-2 small's engine
step took 12,000-56,000 faults (600-740 ms), eager's 260,000-298,000 (about 1,040 ms). With
mmap's threshold fixed at glibc's ceiling (32 MB) and trimming off, the heap keeps what it had,
the faults fall to ~900 (the larger blocks are mapped and advised huge pages by the engine,
plan.cpp) and the step to ~535 ms; peak RSS stayed level on GPT-2 and rose 2-5% on BERT-base,
room the heap keeps between blocks (docs/BENCHMARKS.md, "Issue 17: page faults in a training
step").

The setting is the process's, not one graph's (glibc has one malloc), so it is made once, the
first time the backend compiles a graph that asks for it (CompilerConfig.keep_freed_memory) and
never undone. It is left alone where the user chose: malloc variables in the environment
(MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES with glibc.malloc), another
allocator preloaded (LD_PRELOAD: jemalloc, tcmalloc, mimalloc, whose own settings apply), or a
C library without mallopt. What it costs: memory freed between steps stays with the process
(resident, reused by the next step) instead of going back to the system.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Optional

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit systems
TRIM_THRESHOLD = 2**31 - 1  # the largest mallopt takes (an int): trimming in effect off

_lock = threading.Lock()
_outcome: Optional[str] = None  # what the one attempt found, for every later report


def _user_choice() -> Optional[str]:
    """Why the process's malloc settings are the user's, or None."""
    env = os.environ
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_"):
        if name in env:
            return f"{name} is set in the environment"
    if "glibc.malloc" in env.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets glibc.malloc tunables"
    preload = env.get("LD_PRELOAD", "")
    if "malloc" in preload:  # jemalloc, tcmalloc, mimalloc: their settings apply, not glibc's
        return f"another allocator is preloaded ({preload})"
    return None


def _apply() -> str:
    reason = _user_choice()
    if reason is not None:
        return f"left as the user set it: {reason}"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "left alone: the C library has no mallopt (not glibc)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # The two belong together: either one alone turns off glibc's adaptation of the other, and
    # can fault more than the defaults (docs/decisions.md).
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        return "left alone: mallopt refused M_MMAP_THRESHOLD"
    if not mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        return "mmap threshold fixed at 32 MB, but mallopt refused M_TRIM_THRESHOLD (trimming stays on)"
    return (f"freed memory kept for reuse (mallopt: M_MMAP_THRESHOLD {MMAP_THRESHOLD >> 20} MB, trimming off; "
            "CompilerConfig.keep_freed_memory)")


def keep_freed_memory(wanted: Optional[bool], training: bool) -> Optional[str]:
    """Sets the process's malloc to keep freed memory when `wanted` is True, or None and the
    graph is a training graph; once per process. Returns what the process's malloc does (for
    the report), or None when this graph did not ask."""
    global _outcome
    if wanted is False or (wanted is None and not training):
        return None
    with _lock:
        if _outcome is None:
            _outcome = _apply()
        return _outcome
