"""The process's malloc kept from handing freed memory back (python/updraft/host_memory.py,
CompilerConfig.keep_freed_memory): set by the first training graph the engine compiles, or by
any graph with True, never with False or over the user's own malloc settings; the report says
which. Each case runs in a fresh interpreter, since the setting is the process's."""
import os
import subprocess
import sys

import pytest

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


# keep_freed_memory is a setting of glibc's malloc (mallopt), and these tests read glibc's heap
# (the program break): with another C library there is nothing to set or read, and the report
# says "left alone" instead.
glibc_only = pytest.mark.skipif(not _glibc(),
                                reason="keep_freed_memory sets glibc's malloc; this C library is not glibc")


@glibc_only
def test_a_training_compile_keeps_freed_memory_and_says_so():
    code = _FIRST_16MB + _TRAIN.format(knob="") + "print(from_heap())\nprint(len(notes))\nprint(notes[0])\n"
    heap, count, note = _run(code)
    assert heap == "True"
    assert int(count) == 2  # the forward's and the backward's reports both say it
    assert note.startswith("freed memory kept for reuse (mallopt")


@glibc_only
def test_not_set_when_the_config_says_no_or_the_user_set_malloc():
    # False: nothing set, nothing reported.
    lines = _run(_FIRST_16MB + _TRAIN.format(knob="keep_freed_memory=False") + "print(from_heap())\nprint(notes)\n")
    assert lines[-2:] == ["False", "[]"]  # mapped: glibc's own default
    # The user's own setting (any malloc variable) wins, and the report names it.
    lines = _run(_TRAIN.format(knob="") + "print(notes[0])\n", MALLOC_ARENA_MAX="2", MALLOC_TOP_PAD_="0")
    assert lines[-1] == "left as the user set it: MALLOC_TOP_PAD_ is set in the environment"
    lines = _run(_TRAIN.format(knob="") + "print(notes[0])\n", GLIBC_TUNABLES="glibc.malloc.trim_threshold=1")
    assert lines[-1] == "left as the user set it: GLIBC_TUNABLES sets glibc.malloc tunables"


@glibc_only
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
    assert _run(infer.format(knob="keep_freed_memory=True"))[-1].startswith("['freed memory kept for reuse")


def test_config_validates_the_knob():
    from updraft import CompilerConfig

    with pytest.raises(TypeError, match="keep_freed_memory must be True, False or None"):
        CompilerConfig(keep_freed_memory="yes")
