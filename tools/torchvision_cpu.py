"""torchvision beside the CPU build of torch, for the tests (issue 13).

PyPI's torchvision 0.28.0 (the release paired with torch 2.13.0) is a CUDA build: its `_C.so`
and `image.so` list `libc10_cuda.so`, `libtorch_cuda.so` and `libcudart.so.13` as needed
libraries. The CPU torch has neither of the first two, so `_C.so` fails to load, torchvision
swallows that, and the import dies later with "operator torchvision::nms does not exist". No
CPU wheel of 0.28.0 and no source distribution exist on PyPI, so this does what the loader
needs and nothing more:

- `install DIR` puts the wheel, without dependencies, in DIR/site (not in the virtual
  environment: other packages there, transformers among them, import torchvision when they find
  it, and must not meet one that needs this preparation), then generates DIR/stubs/libc10_cuda.so
  and DIR/stubs/libtorch_cuda.so: one function per CUDA symbol the wheel's libraries import, each
  printing its C++ name and aborting, and a zeroed object for the one data symbol (the CUDA
  allocator pointer). `libcudart.so.13` is the wheel's own copy in torchvision.libs. The list is
  taken from the wheel with `nm` at set-up time; a symbol outside the c10::cuda / at::cuda
  namespaces that torch does not export stops the set-up with its name.
- `activate()` loads those three libraries (their sonames then satisfy the wheel's needed
  entries), puts DIR/site first on sys.path and imports torchvision; it checks that the ops
  library registered (torchvision.nms).

Nothing CUDA can run: torch's CPU build makes no CUDA tensors, so the CUDA kernels registered by
`_C.so` are never dispatched to; the stubs are there to be linked, and abort with the function's
name if that ever changes. The CPU kernels (nms, roi_align, ...) are torchvision's own.

    python tools/torchvision_cpu.py install build/torchvision   # scripts/setup.sh does this
    python tools/torchvision_cpu.py check build/torchvision     # import + one nms, in this process
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys

TORCHVISION = "0.28.0"
TORCH = "2.13.0"  # the torch release TORCHVISION was built against
DEFAULT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "torchvision")
STUB_LIBS = {  # soname -> mangled-name prefixes of the namespaces it stands in for
    "libc10_cuda.so": ("_ZN3c104cuda", "_ZNK3c104cuda"),
    "libtorch_cuda.so": ("_ZN2at4cuda", "_ZNK2at4cuda"),
}
SETUP_HINT = "run `bash scripts/setup.sh` (it installs torchvision for the tests into build/torchvision)"


class TorchvisionUnavailable(RuntimeError):
    pass


def _stamp() -> dict:
    return {"torchvision": TORCHVISION, "torch": _torch_version(), "stubs": sorted(STUB_LIBS)}


def _torch_version() -> str:
    from importlib import metadata  # not `import torch`: the up-to-date check stays ~0.1 s

    return metadata.version("torch").split("+")[0]


def _nm(path: str, *flags: str) -> list[str]:
    out = subprocess.run(["nm", "-D", *flags, path], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def _undefined_strong(path: str) -> set[str]:
    """Undefined symbols the loader must resolve (RTLD_NOW): weak ones and versioned ones
    (glibc, libstdc++, the wheel's own libcudart) are left out."""
    out = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True, text=True,
                         check=True).stdout
    names = set()
    for line in out.splitlines():
        kind, name = line.split()[-2:]
        if kind == "U" and "@" not in name:
            names.add(name)
    return names


def _demangle(names: list[str]) -> list[str]:
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return out if len(out) == len(names) else names


def missing_symbols(site: str) -> dict[str, list[str]]:
    """The wheel's imports that neither torch's CPU libraries, the bundled torchvision.libs nor
    the interpreter define, sorted by stub library."""
    import importlib.util

    torch_dir = os.path.dirname(importlib.util.find_spec("torch").origin)  # no import: ~3 s
    wanted: set[str] = set()
    for so in glob.glob(os.path.join(site, "torchvision", "*.so")):
        wanted |= _undefined_strong(so)
    provided: set[str] = set()
    for lib in glob.glob(os.path.join(torch_dir, "lib", "*.so*")) + \
            glob.glob(os.path.join(site, "torchvision.libs", "*.so*")):
        provided |= {n.split("@")[0] for n in _nm(lib, "--defined-only")}
    by_lib: dict[str, list[str]] = {lib: [] for lib in STUB_LIBS}
    unknown = []
    for name in sorted(wanted - provided):
        if name.startswith(("Py", "_Py")):  # the interpreter's C API
            continue
        lib = next((lib for lib, pre in STUB_LIBS.items() if name.startswith(pre)), None)
        (by_lib[lib] if lib else unknown).append(name)
    if unknown:
        raise TorchvisionUnavailable(
            f"[torchvision] torchvision {TORCHVISION} needs symbols that neither torch {TORCH} (CPU) "
            f"nor the CUDA stubs provide: {', '.join(_demangle(unknown))}; the stubs cover only "
            f"c10::cuda and at::cuda, so pair torchvision with its own torch release")
    return by_lib


def _stub_source(soname: str, names: list[str]) -> str:
    lines = [
        f"/* Generated by tools/torchvision_cpu.py: {soname} for torchvision {TORCHVISION} beside",
        f"   torch's CPU build. Every function aborts: nothing CUDA can run in this process. */",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "static void no_cuda(const char *what) {",
        f'  fprintf(stderr, "[torchvision] %s called, but this is torch\'s CPU build: {soname} '
        f'here is a stub (tools/torchvision_cpu.py) that only lets torchvision\'s CPU ops load; '
        f'aborting\\n", what);',
        "  abort();",
        "}",
    ]
    for name, pretty in zip(names, _demangle(names)):
        pretty = pretty.replace("\\", "\\\\").replace('"', '\\"')
        if "(" in pretty:  # a function
            lines.append(f'void {name}(void) {{ no_cuda("{pretty}"); }}')
        else:  # an object (c10::cuda::CUDACachingAllocator::allocator, an atomic pointer): null
            lines.append(f"char {name}[64] __attribute__((aligned(16)));")
    return "\n".join(lines) + "\n"


def install(dest: str) -> None:
    dest = os.path.abspath(dest)
    stamp_path = os.path.join(dest, "stamp.json")
    if _torch_version() != TORCH:
        raise TorchvisionUnavailable(
            f"[torchvision] torchvision {TORCHVISION} pairs with torch {TORCH}, found "
            f"{_torch_version()}; change TORCHVISION in tools/torchvision_cpu.py with the torch pin")
    try:
        with open(stamp_path) as f:
            if json.load(f) == _stamp():
                return  # already installed for this torch
    except (OSError, ValueError):
        pass
    missing_tools = [t for t in ("nm", "c++filt", "cc") if shutil.which(t) is None]
    if missing_tools:
        raise TorchvisionUnavailable(
            f"[torchvision] {', '.join(missing_tools)} not found: the stub libraries are built with "
            f"binutils and a C compiler; install them (Debian: apt-get install binutils gcc)")
    site = os.path.join(dest, "site")
    stubs = os.path.join(dest, "stubs")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-deps", "--upgrade", "--target", site, f"torchvision=={TORCHVISION}"],
                   check=True)
    os.makedirs(stubs, exist_ok=True)
    for soname, names in missing_symbols(site).items():
        src = os.path.join(stubs, soname + ".c")
        with open(src, "w") as f:
            f.write(_stub_source(soname, names))
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-Wl,-soname,{soname}", "-o",
                        os.path.join(stubs, soname), src], check=True)
    # The check runs in a fresh process: this one has not loaded the libraries yet, and a
    # failed load would leave torch.ops half-registered.
    subprocess.run([sys.executable, os.path.abspath(__file__), "check", dest], check=True)
    with open(stamp_path, "w") as f:
        json.dump(_stamp(), f)


def activate(dest: str | None = None, _stamped: bool = True):
    """Imports torchvision from `dest` (default: build/torchvision in this checkout) and returns
    the module. Raises TorchvisionUnavailable, saying to run the set-up, when it is not there."""
    dest = os.path.abspath(dest or DEFAULT_DIR)
    site = os.path.join(dest, "site")
    cudart = glob.glob(os.path.join(site, "torchvision.libs", "libcudart*.so*"))
    stubs = [os.path.join(dest, "stubs", lib) for lib in STUB_LIBS]
    try:
        with open(os.path.join(dest, "stamp.json")) as f:
            stamp = json.load(f)
    except (OSError, ValueError):
        stamp = None
    if not cudart or not all(os.path.exists(p) for p in stubs) or (_stamped and stamp is None):
        raise TorchvisionUnavailable(
            f"[torchvision] torchvision {TORCHVISION} for the CPU torch is not installed in {dest}; "
            f"{SETUP_HINT}")
    if _stamped and stamp != _stamp():
        raise TorchvisionUnavailable(
            f"[torchvision] {dest} was set up for {stamp}, this environment needs {_stamp()}; "
            f"{SETUP_HINT}")
    if "torchvision" in sys.modules:  # activated before in this process
        return sys.modules["torchvision"]
    # torch first: _C.so's rpath points at the machine it was built on, so it finds libc10.so and
    # libtorch*.so, like the stubs, only as libraries already loaded (by soname).
    import torch

    for lib in cudart + stubs:
        ctypes.CDLL(lib)  # loaded once, the soname satisfies _C.so's needed entry
    sys.path.insert(0, site)
    import torchvision

    if not torchvision.extension._has_ops() or not hasattr(torch.ops.torchvision, "nms"):
        raise TorchvisionUnavailable(
            f"[torchvision] torchvision {torchvision.__version__} imported from {site} without its "
            f"C++ ops (torchvision.nms); {SETUP_HINT}")
    return torchvision


def _check(dest: str) -> None:
    tv = activate(dest, _stamped=False)
    import torch

    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [20.0, 20.0, 30.0, 30.0]])
    keep = tv.ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5)
    if keep.tolist() != [0, 2]:
        raise TorchvisionUnavailable(f"[torchvision] nms gave {keep.tolist()}, expected [0, 2]")
    print(f"[torchvision] {tv.__version__} imports beside torch {torch.__version__}; nms runs")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in ("install", "check"):
        sys.exit("usage: python tools/torchvision_cpu.py install|check [DIR]")
    where = sys.argv[2] if len(sys.argv) == 3 else DEFAULT_DIR
    try:
        install(where) if sys.argv[1] == "install" else _check(where)
    except TorchvisionUnavailable as e:
        sys.exit(str(e))
    except subprocess.CalledProcessError as e:
        sys.exit(f"[torchvision] `{' '.join(map(str, e.cmd))}` failed (exit {e.returncode}); its "
                 f"output is above")
