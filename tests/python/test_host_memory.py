"""The process's malloc kept from handing freed memory back (python/updraft/host_memory.py,
CompilerConfig.keep_freed_memory): set by the first training graph the engine compiles, or by
any graph with True, never with False or over the user's own malloc settings; the report says
which. Each case runs in a fresh interpreter, since the setting is the process's."""
import os
import subprocess
import sys

import pytest

from updraft import host_memory

# Where a 16 MB block comes from, the first time one is asked for: glibc's defaults map it
# (mmap above an adaptive threshold that starts at 128 KB), with the threshold fixed at 32 MB it
# comes from the heap, below the program break (sbrk(0)) and reused when freed.
_FIRST_16MB = """
import ctypes, torch
libc = ctypes.CDLL("libc.so.6")
libc.sbrk.restype, libc.sbrk.argtypes = ctypes.c_void_p, [ctypes.c_long]
def from_heap():
    b = torch.empty(4 << 20)
    return b.data_ptr() < libc.sbrk(0)
"""

_TRAIN = """
import torch, updraft
from updraft import CompilerConfig, get_backend
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
cfg = CompilerConfig(training="engine", {knob})
torch.compile(m, backend=get_backend(cfg))(torch.randn(8, 16)).sum().backward()
notes = [r for g in updraft.last_report().graphs for k, r in g.compiles if k == "host memory"]
"""


def _run(code: str, **env_overrides: str) -> list:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")}
    env.update(env_overrides)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # no confstr, or a C library without the name
        return False


# keep_freed_memory is a setting of glibc's malloc (mallopt), and where the heap's program break
# can be read (glibc) the tests check where a block comes from. With another C library there is
# nothing to set: the report says "left alone" (its reasons: test_outcomes_where_mallopt_*).
GLIBC = _glibc()
KEPT = "freed memory kept for reuse (mallopt" if GLIBC else "left alone"


def _heap_check(code: str) -> str:
    """`code`, then where a new 16 MB block comes from (glibc only: elsewhere "n/a")."""
    return (_FIRST_16MB + code + "print(from_heap())\n") if GLIBC else (code + "print('n/a')\n")


def test_a_training_compile_keeps_freed_memory_and_says_so():
    count, note, heap = _run(_heap_check(_TRAIN.format(knob="") + "print(len(notes))\nprint(notes[0])\n"))
    assert heap == ("True" if GLIBC else "n/a")
    assert int(count) == 2  # the forward's and the backward's reports both say it
    assert note.startswith(KEPT)


def test_not_set_when_the_config_says_no_or_the_user_set_malloc():
    # False: nothing set, nothing reported.
    lines = _run(_heap_check(_TRAIN.format(knob="keep_freed_memory=False") + "print(notes)\n"))
    assert lines[-2:] == ["[]", "False" if GLIBC else "n/a"]  # mapped: glibc's own default
    # The user's own setting (any malloc variable) wins, and the report names it.
    lines = _run(_TRAIN.format(knob="") + "print(notes[0])\n", MALLOC_ARENA_MAX="2", MALLOC_TOP_PAD_="0")
    assert lines[-1] == "left as the user set it: MALLOC_TOP_PAD_ is set in the environment"
    lines = _run(_TRAIN.format(knob="") + "print(notes[0])\n", GLIBC_TUNABLES="glibc.malloc.trim_threshold=1")
    assert lines[-1] == "left as the user set it: GLIBC_TUNABLES sets glibc.malloc tunables"


def test_inference_only_when_asked():
    infer = """
import torch, updraft
from updraft import CompilerConfig, get_backend
m = torch.nn.Linear(16, 4).eval()
with torch.no_grad():
    torch.compile(m, backend=get_backend(CompilerConfig(inference="engine", {knob})))(torch.randn(8, 16))
print([r for g in updraft.last_report().graphs for k, r in g.compiles if k == "host memory"])
"""
    assert _run(infer.format(knob=""))[-1] == "[]"
    assert _run(infer.format(knob="keep_freed_memory=True"))[-1].startswith(f"['{KEPT}")


class _Libc:
    """A C library as ctypes sees it, whose mallopt accepts the parameters in `accepts`."""

    def __init__(self, accepts):
        self.accepts = accepts

        def mallopt(param, value):
            return int(param in self.accepts)
        self.mallopt = mallopt


@pytest.mark.parametrize("libc, want", [
    (None, "left alone: the C library has no mallopt (not glibc)"),
    (_Libc(()), "left alone: mallopt refused M_MMAP_THRESHOLD"),  # musl's mallopt: a stub returning 0
    (_Libc((host_memory.M_MMAP_THRESHOLD,)), "mmap threshold fixed at 32 MB, but mallopt refused M_TRIM_THRESHOLD (trimming stays on)"),
    (_Libc((host_memory.M_MMAP_THRESHOLD, host_memory.M_TRIM_THRESHOLD)), "freed memory kept for reuse (mallopt: M_MMAP_THRESHOLD 32 MB, trimming off; "
                      "CompilerConfig.keep_freed_memory)"),
], ids=["no-mallopt", "mmap-refused", "trim-refused", "both"])
def test_outcomes_where_mallopt_is_missing_or_refuses(monkeypatch, libc, want):
    # The report's words for each C library, on any machine: host_memory._apply against a stand-in
    # for the C library (nothing is set in this process).
    def load(name):
        if libc is None:
            raise OSError(f"{name}: no such library")
        return libc

    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES", "LD_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(host_memory.ctypes, "CDLL", load)
    assert host_memory._apply() == want


def test_config_validates_the_knob():
    from updraft import CompilerConfig

    with pytest.raises(TypeError, match="keep_freed_memory must be True, False or None"):
        CompilerConfig(keep_freed_memory="yes")
