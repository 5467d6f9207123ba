"""The persistent compile cache: optimised engine graphs on disk, one file per partition.

    torch.compile(model, backend="updraft", options={"cache_dir": "~/.cache/updraft"})
    UPDRAFT_CACHE_DIR=~/.cache/updraft python serve.py          # the same, for every compile

A partition's entry is keyed by what decides its optimised graph: the partition's aten code,
its inputs' dtypes and (symbolic) shapes, the values of non-parameter constants, the compile
options that change the graph, and the torch version, engine version and CPU features. Weight
values are not part of the key and not stored: an entry holds references to the parameters and
the recipes of the constants the passes folded from them, so a new checkpoint of the same model
hits the cache and is refit on load. The folded values are stored too when they fit (a quarter
of `cache_max_bytes`), with fingerprints of the parameters they came from, so a restart with the
same weights uses them instead of recomputing. The file format is docs/format.md.

Files are written to a temporary name in the same folder and renamed over the entry (atomic on
POSIX), so a reader sees a whole old entry, a whole new one, or none; two processes writing the
same entry at once is safe. A compile stores its entry on a background thread (`put_async`: an
89 MB ResNet-50 entry takes ~0.6 s to serialise, write and fsync), so the first call returns
without waiting for it. The thread is not a daemon: interpreter exit waits for it, and a process
killed meanwhile leaves at most a temporary file, never a partial entry (an evict removes
temporary files over an hour old). `wait_for_writes()` waits for every pending write; a lookup
of a key being written waits for that write. Folders are created 0700 and files 0600. The folder is bounded
(`cache_max_bytes`): after a write, the least recently used entries (by modification time, which
a hit refreshes when it is over a minute old) are removed until it fits. An entry that fails to load (corrupt, truncated,
another format or engine version, or any other failure) is reported once as a warning, removed,
and rebuilt.

What is trusted (docs/format.md, "Trust"): the folder must be the user's own and writable by no
one else, unless it has the sticky bit (then others may add files but not remove or rename the
user's); an entry is loaded only from a regular file the user owns that no one else may write,
read into the process's memory (never mapped: changing or truncating the file later cannot
reach a running model). Anything else under an entry's name is refused, removed where it can
be, and rebuilt; eviction counts and removes only the user's own regular files.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import torch

ENV_DIR = "UPDRAFT_CACHE_DIR"
SUFFIX = ".updraft"
KEY_VERSION = "updraft-cache-key 5"

TMP_SUFFIX = ".tmp"
STALE_TMP_SECONDS = 3600  # a temporary file this old belongs to a writer that died
# A hit refreshes an entry's modification time when it is older than this: least recently used
# to the minute is as good for eviction, and most hits then write nothing.
REFRESH_SECONDS = 60

_stats_lock = threading.Lock()
# Entry path -> the thread writing it (put_async), until it finishes.
_pending: dict = {}
_pending_lock = threading.Lock()


def wait_for_writes() -> None:
    """Blocks until every entry this process is storing in the background is written."""
    while True:
        with _pending_lock:
            threads = list(_pending.values())
        if not threads:
            return
        for t in threads:
            t.join()


def _wait_for(path: Path) -> None:
    with _pending_lock:
        t = _pending.get(path)
    if t is not None and t is not threading.current_thread():
        t.join()


class DiskCache:
    """Entries under one folder; every method is safe against other processes using it."""

    def __init__(self, root: str | os.PathLike, max_bytes: int) -> None:
        self.root = Path(root).expanduser()
        # The folder as text: a lookup joins and stats strings (pathlib costs ~10x that the
        # first time in a process, and a warm load is ~2 ms).
        self.dir = str(self.root)
        self.max_bytes = max_bytes
        try:
            if not self.root.is_dir():  # a stat; mkdir(exist_ok=True) raises and catches inside
                self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise OSError(f"[updraft.cache] cannot create the cache folder {self.root}: {e}; "
                          "set CompilerConfig(cache_dir=...) or UPDRAFT_CACHE_DIR to a writable folder") from e
        _check_folder(self.dir)

    def path(self, key: str) -> Path:
        return Path(self._name(key))

    def _name(self, key: str) -> str:
        return os.path.join(self.dir, key + SUFFIX)

    def lookup(self, key: str) -> Optional[Path]:
        """The entry's path if it exists (and marks it recently used), else None. Waits for this
        process's own background write of the key, if one is running."""
        name = self._name(key)
        if _pending:
            _wait_for(Path(name))
        try:
            st = os.lstat(name)  # not through a link: utime would touch the link's target
        except FileNotFoundError:
            return None
        except OSError:
            return Path(name)  # the load reports what is wrong with it
        if _ours(st):  # anything else is refused, and reported, by the load
            _refresh(name, st)
        return Path(name)

    def get(self, key: str) -> Optional[bytes]:
        """The entry's bytes, or None when there is none; OSError for a file the trust checks
        refuse (as the engine's load does: docs/format.md)."""
        name = self._name(key)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            why = _untrusted_file(st)
            if why:
                raise PermissionError(f"[updraft.cache] entry {name} {why}; remove it")
            data = f.read()
        _refresh(name, st)
        return data

    def put_async(self, key: str, make: Callable[[], bytes], done: Callable[[Optional[BaseException]], None]) -> None:
        """Stores `make()` under `key` on a background thread, then calls `done(None)`, or
        `done(error)` when making or writing failed. A second put of a key still being written
        waits for the first."""
        p = self.path(key)

        def write() -> None:
            err = None
            try:
                self.put(key, make())
            except BaseException as e:  # reported through done(); a thread has no caller
                err = e
            finally:
                with _pending_lock:
                    if _pending.get(p) is threading.current_thread():
                        del _pending[p]
            done(err)

        t = threading.Thread(target=write, name=f"updraft-cache-write-{key[:8]}", daemon=False)
        with _pending_lock:
            prev = _pending.get(p)
            _pending[p] = t
        if prev is not None:
            prev.join()
        t.start()

    def put(self, key: str, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=TMP_SUFFIX, dir=self.root)  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path(key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self.evict()

    def discard(self, key: str) -> None:
        """Removes what is under the key's name, if it can: a file or link (not followed), but
        not a folder, and not a file the user may not remove (a sticky folder, another user's
        file). Best effort: what stays is refused again by the next load, and a write of the key
        reports why it cannot replace it."""
        try:
            self.path(key).unlink()
        except OSError:
            pass

    def entries(self) -> list[tuple[Path, int, float]]:
        """(path, bytes, mtime) of every entry, oldest first: the user's own regular files. A
        folder, link or other user's file with an entry's name is not one (a load refuses it)."""
        out = []
        for p in self.root.glob(f"*{SUFFIX}"):
            try:
                st = p.lstat()
            except FileNotFoundError:
                continue  # removed by another process meanwhile
            if _ours(st):
                out.append((p, st.st_size, st.st_mtime))
        return sorted(out, key=lambda e: e[2])

    def evict(self) -> list[Path]:
        """Removes the least recently used entries until the folder is within the bound. An
        entry that cannot be removed (a read-only folder) is passed over and no longer counted,
        so it neither stops eviction nor makes it remove everything else."""
        self._remove_stale_temporaries()
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = []
        for p, size, _ in entries:
            if total <= self.max_bytes:
                break
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                pass  # removed meanwhile, or not removable: either way no longer ours to count
            total -= size
        return removed


    def _remove_stale_temporaries(self) -> None:
        """Temporary files of writers that died before their rename (killed processes)."""
        cutoff = time.time() - STALE_TMP_SECONDS
        for p in self.root.glob(f".*{TMP_SUFFIX}"):
            try:
                st = p.lstat()
                if _ours(st) and st.st_mtime < cutoff:
                    p.unlink()
            except OSError:
                pass  # renamed or removed by its writer or another process meanwhile


def _ours(st: os.stat_result) -> bool:
    """A regular file of this user: what the cache wrote (others' files are not counted or removed)."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def _untrusted_file(st: os.stat_result) -> str:
    """Why an entry file is not loaded (empty when it is): the checks the engine's load makes
    (src/cache/entry.cpp, read_trusted_entry), for DiskCache.get."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by user {st.st_uid}, not by this user ({os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _check_folder(folder: str) -> None:
    """Raises PermissionError unless `folder` is this user's and no one else may change what is
    in it: not writable by group or others, or writable but sticky (others may add files, which
    are refused, but not remove or rename the user's). The folder itself is reached through
    links: its path is the user's own setting."""
    st = os.stat(folder)
    uid = os.geteuid()
    if st.st_uid != uid:
        raise PermissionError(f"[updraft.cache] the cache folder {folder} is owned by user {st.st_uid}, not by this "
                              f"user ({uid}), who could change its entries; set CompilerConfig(cache_dir=...) or "
                              "UPDRAFT_CACHE_DIR to a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise PermissionError(f"[updraft.cache] the cache folder {folder} is writable by other users (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}), who could replace its entries; chmod go-w {folder} "
                              f"(or chmod +t {folder} to share it), or set CompilerConfig(cache_dir=...) or "
                              "UPDRAFT_CACHE_DIR to a folder only you can write")


def _refresh(p: str | Path, st: os.stat_result) -> None:
    """Marks a hit entry recently used (its modification time, which eviction orders by), unless
    it already is: setting the time is an inode write that ext4 journals, ~0.1-0.6 ms the first
    time after each journal commit, while the stat that shows it is not needed costs ~2 us."""
    if time.time() - st.st_mtime < REFRESH_SECONDS:
        return
    try:
        os.utime(p)
    except OSError:
        pass  # removed meanwhile, or not ours to touch: it is used all the same


_caches: dict = {}


def cache_for(config) -> Optional[DiskCache]:
    """The DiskCache a config asks for (CompilerConfig.cache_dir, else UPDRAFT_CACHE_DIR), or None.

    One per (folder, bound) in a process: a model's partitions share it, and the folder is
    checked (created) once rather than per partition."""
    root = config.cache_dir if config.cache_dir is not None else os.environ.get(ENV_DIR, "")
    if not root:
        return None
    k = (str(root), config.cache_max_bytes)
    disk = _caches.get(k)
    if disk is None or not os.path.isdir(disk.dir):  # removed meanwhile: create it again
        disk = _caches[k] = DiskCache(root, config.cache_max_bytes)
    return disk


def entry_params(args, positions: list[int]):
    """The frozen parameters `args[j]`, j in `positions`, as `_C.load_entry(_file)` takes them:
    data pointers, engine dtypes and shapes, read by the engine in one pass (BERT-base has 200;
    per parameter in Python this was ~0.5 ms of a ~3 ms warm load). Its `.text` describes each
    one's dtype and shape for `partition_key`.

    Pointers, not DLPack: exporting a parameter needs detach(), a dispatched op that costs
    ~20 us under the dispatch modes torch has active during a compiled graph's first call
    (when partitions build), ~5 ms for BERT's 200 parameters."""
    from . import _C
    from .lowerer import DTYPES

    return _C.entry_params(args, positions, DTYPES, torch.Tensor)


def _tensor_digest(t: torch.Tensor) -> str:
    t = t.detach().contiguous()
    if t.numel() == 0:
        return "empty"
    raw = t.reshape(-1).view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8).reshape(-1)
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


def partition_key(code: str, inputs: list[tuple[int, str, object]], params: str, options: dict, engine: str,
                  cpu: str) -> str:
    """sha256 over everything that decides a partition's optimised graph.

    `inputs` holds (placeholder index, kind, value) for the placeholders that are not frozen
    parameters: ("runtime", (meta, memory order or None)), ("literal", tensor), ("size", SymInt) for a SymInt the
    engine takes as a size input (its value binds a symbol), or ("other", value); `params`
    describes the parameters (`entry_params(...).text`: index, dtype and shape of each).
    Parameters contribute dtype and shape only; literal constants contribute their bytes;
    runtime inputs their dtype and (symbolic) shape; size inputs their expression.
    """
    from . import _C

    # The code by its XXH3-64 and length (scheme 4; scheme 3 put the ~50 KB text itself
    # through sha256, ~0.1 ms of a ~2 ms warm load).
    parts = [f"{KEY_VERSION}\nengine {engine}\ncpu {cpu}\ntorch {torch.__version__}\n",
             repr(sorted(options.items())), f"code {_C.text_digest(code)} {len(code)}"]
    for j, kind, v in inputs:
        if kind == "runtime":
            t, order = v
            desc = f"{t.dtype} {t.shape}"  # torch.Size prints symbolic sizes by name (s0)
            if order is not None:  # taken in its memory order (engine_partition.input_orders)
                desc += f" order {order}"
        elif kind == "literal":
            desc = f"{v.dtype} {tuple(v.shape)} {_tensor_digest(v)}"
        else:
            desc = repr(v)
        parts.append(f"input {j} {kind} {desc}")
    parts.append(f"params\n{params}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
