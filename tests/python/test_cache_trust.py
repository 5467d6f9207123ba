"""What the compile cache trusts (docs/format.md, "Trust"): a loaded entry is private to the
process (writing or truncating its file later changes nothing), only regular files owned by the
user and writable by no one else are loaded, a folder others may write is refused unless it is
sticky and the user's own, eviction steps over what it cannot remove, and any load failure
removes and rebuilds the entry."""
import os
import stat
import struct
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import updraft
from updraft import _C as C
from updraft.cache import DiskCache, entry_params

sys.path.insert(0, os.path.dirname(__file__))
from test_cache import X, _compile_run, _entries, _fields, _model, _pack  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.geteuid() == 0
OTHER_UID = 65534  # "nobody": a user other than this one (chown needs root)


# -- 9: a loaded entry is private to the process

_N = 64 * 1024  # a 256 KB stored constant: many pages of the file


def _blob_entry(d):
    """An entry for x + w with w stored by value (field b0), and w."""
    w = torch.arange(_N, dtype=torch.float32)
    g = C.Graph()
    x = g.add_input("x", "f32", [_N])
    g.set_outputs(g.add_node("add", [x, g.add_constant("w", w)]))
    raw = C.save_entry(C.compile(g, {}), "k", "x + w")
    path = os.path.join(d, "k.updraft")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    return path, raw, w


def _run(cg, x):
    out = torch.empty_like(x)
    cg.run([x], [out])
    return out


def test_writing_a_loaded_entry_in_place_changes_nothing(tmp_path):
    path, raw, w = _blob_entry(tmp_path)
    cg, _ = C.load_entry_file(path, "k", entry_params((), []), {})
    x = torch.randn(_N, generator=torch.Generator().manual_seed(0))
    assert torch.equal(_run(cg, x), x + w)
    at = raw.index(w.numpy().tobytes())
    with open(path, "r+b") as f:  # in place: same inode, as an editor or a careless cp would
        f.seek(at)
        f.write(torch.full((_N,), 42.0).numpy().tobytes())
    assert torch.equal(_run(cg, x), x + w)


_TRUNCATE = textwrap.dedent("""
    import os, sys, torch
    sys.path.insert(0, {here!r})
    from updraft import _C as C
    from updraft.cache import entry_params
    from test_cache_trust import _blob_entry, _run, _N
    path, raw, w = _blob_entry({d!r})
    cg, _ = C.load_entry_file(path, "k", entry_params((), []), {{}})
    x = torch.randn(_N)
    os.truncate(path, 0)
    print(torch.equal(_run(cg, x), x + w))
""")


def test_truncating_a_loaded_entry_does_not_kill_the_process(tmp_path):
    # In a process of its own: a SIGBUS there fails this test instead of ending pytest.
    out = subprocess.run([sys.executable, "-c", _TRUNCATE.format(here=HERE, d=str(tmp_path))],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split() == ["True"]


# -- 10: only the user's own regular files, in a folder others cannot write, are loaded

def _planted(raw):
    """The entry with its stored constant 0.5 (field b0, the model's `* 0.5`) made 21.0: a
    valid entry (checksum and all) that computes 42x the model's output."""
    version, fields = _fields(raw)
    b0 = dict(fields)["b0"]
    assert b0.endswith(struct.pack("<f", 0.5))
    return _pack(version, [(n, d[:-4] + struct.pack("<f", 21.0) if n == "b0" else d) for n, d in fields])


def _plant_foreign(path):
    os.chown(path, OTHER_UID, OTHER_UID)


def _plant_symlink(path):
    target = path.parent / "elsewhere" / path.name
    target.parent.mkdir()
    os.replace(path, target)
    os.symlink(target, path)


PLANTS = {
    "owned by another user": (_plant_foreign, f"owned by user {OTHER_UID}"),
    "writable by others": (lambda p: os.chmod(p, 0o606), "writable by other users (mode 0606)"),
    "writable by the group": (lambda p: os.chmod(p, 0o620), "writable by other users (mode 0620)"),
    "a symbolic link": (_plant_symlink, "is a symbolic link"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_planted_entry_is_refused_removed_and_rebuilt(tmp_path, plant):
    if plant == "owned by another user" and not ROOT:
        pytest.skip("giving a file to another user needs root")
    m = _model(0)
    want, _ = _compile_run(m, tmp_path)
    (entry,) = _entries(tmp_path)
    path = tmp_path / entry
    path.write_bytes(_planted(path.read_bytes()))  # what an attacker with write access could put there
    how, reason = PLANTS[plant]
    how(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, rep = _compile_run(m, tmp_path)
    msgs = [str(w.message) for w in caught if "[updraft.cache]" in str(w.message)]
    assert len(msgs) == 1 and "unusable" in msgs[0] and reason in msgs[0], msgs
    assert torch.equal(got, want)  # not 42x
    assert rep.partitions[0].cache.startswith("rebuilt") and rep.partitions[0].cache.endswith("stored"), str(rep)
    assert not path.is_symlink() and path.stat().st_uid == os.geteuid()  # replaced by the user's own
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    _, rep = _compile_run(m, tmp_path)
    assert rep.partitions[0].cache == "hit"


_FIFO = textwrap.dedent("""
    import sys, warnings, torch, updraft
    sys.path.insert(0, {here!r})
    from test_cache import _compile_run, _model
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        got, rep = _compile_run(_model(0), {d!r})
    print(rep.partitions[0].cache)
    print([str(w.message) for w in caught])
""")


def test_fifo_under_an_entrys_name_does_not_hang_the_compile(tmp_path):
    _compile_run(_model(0), tmp_path)
    (entry,) = _entries(tmp_path)
    (tmp_path / entry).unlink()
    os.mkfifo(tmp_path / entry, 0o600)  # opened for reading, a FIFO waits for a writer
    out = subprocess.run([sys.executable, "-c", _FIFO.format(here=HERE, d=str(tmp_path))],
                         capture_output=True, text=True, timeout=240)  # hangs for good on failure
    assert out.returncode == 0, out.stderr[-2000:]
    cache, msgs = out.stdout.splitlines()[-2:]
    assert cache.startswith("rebuilt") and cache.endswith("stored"), out.stdout
    assert "is not a regular file (a FIFO)" in msgs, msgs
    assert stat.S_ISREG(os.lstat(tmp_path / entry).st_mode)


def _cache_off_warning(d):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, rep = _compile_run(_model(0), d)
    with torch.no_grad():
        torch.testing.assert_close(got, _model(0)(X), rtol=1e-4, atol=1e-5)
    assert rep.partitions[0].status == "ok" and rep.partitions[0].cache.startswith("off"), str(rep)
    assert _entries(d) == []
    return [str(w.message) for w in caught if "[updraft.cache]" in str(w.message)]


def test_folder_writable_by_others_is_refused(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    msgs = _cache_off_warning(d)
    assert any("writable by other users (mode 0777)" in m and "chmod go-w" in m for m in msgs), msgs


def test_folder_writable_by_the_group_is_refused(tmp_path):
    d = tmp_path / "group"
    d.mkdir()
    os.chmod(d, 0o770)
    msgs = _cache_off_warning(d)
    assert any("writable by other users (mode 0770)" in m for m in msgs), msgs


@pytest.mark.skipif(not ROOT, reason="giving a folder to another user needs root")
def test_folder_owned_by_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, OTHER_UID, OTHER_UID)
    msgs = _cache_off_warning(d)
    assert any(f"owned by user {OTHER_UID}" in m for m in msgs), msgs


def test_sticky_folder_of_the_user_is_used(tmp_path):
    """Others may create files in it but not remove or rename the user's; theirs are refused."""
    d = tmp_path / "sticky"
    d.mkdir()
    os.chmod(d, 0o1777)
    _, rep = _compile_run(_model(0), d)
    assert rep.partitions[0].cache == "miss, stored", str(rep)
    _, rep = _compile_run(_model(0), d)
    assert rep.partitions[0].cache == "hit", str(rep)


# -- 11: eviction steps over what it cannot or must not remove

def test_directory_named_like_an_entry_does_not_stop_eviction(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=2500)
    (tmp_path / "0000.updraft").mkdir()
    (tmp_path / "0000.updraft" / "x").write_bytes(bytes(5000))  # not empty: no rmdir either
    os.utime(tmp_path / "0000.updraft", (1, 1))  # the oldest
    for i in range(4):
        cache.put(f"k{i}", bytes(1000))
        os.utime(cache.path(f"k{i}"), (1000 + i, 1000 + i))
    cache.put("k4", bytes(1000))
    assert [p.name for p, _, _ in cache.entries()] == ["k3.updraft", "k4.updraft"]
    assert (tmp_path / "0000.updraft").is_dir()  # not an entry: left alone


def _evict_as(uid, d):
    """(removed, entries left) of an eviction in `d` (bound 1500 bytes), run by user `uid` in a
    forked process (this one's user when None), or the error it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: switch user, evict, report through the pipe, exit at once
        try:
            os.close(r)
            os.chdir(d)  # then by its relative name: the other user may not reach it by its path
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            cache = DiskCache(".", max_bytes=1500)
            msg = f"{len(cache.evict())} {len(cache.entries())}"
        except BaseException as e:  # noqa: B036 -- reported to the parent, which asserts on it
            msg = repr(e)
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def test_entries_the_user_cannot_remove_do_not_stop_eviction(tmp_path):
    """The folder is read-only to its owner: no entry can be removed. Eviction reports nothing
    removed instead of raising (which failed every later write's eviction). Root may remove
    anything, so as root the evicting process runs as another user, who owns the folder."""
    d = tmp_path / "ro"
    d.mkdir()
    for i in range(3):
        (d / f"k{i}.updraft").write_bytes(bytes(1000))
        os.chmod(d / f"k{i}.updraft", 0o600)
        if ROOT:
            os.chown(d / f"k{i}.updraft", OTHER_UID, OTHER_UID)
    if ROOT:
        os.chown(d, OTHER_UID, OTHER_UID)
    os.chmod(d, 0o500)
    try:
        assert _evict_as(OTHER_UID if ROOT else None, str(d)) == "0 3"
    finally:
        os.chmod(d, 0o700)


# -- 12: any load failure is reported once, and the entry removed and rebuilt

def _fingerprint_past_size_t(raw):
    """A valid entry (checksum and all) whose first fingerprint names parameter 10^24: the
    engine's number parsing fails with std::out_of_range, not an UpdraftError."""
    version, fields = _fields(raw)
    prints = dict(fields)["fingerprints"].decode().splitlines()
    prints[0] = "p" + "9" * 24 + prints[0][prints[0].index(" "):]
    return _pack(version, [(n, ("\n".join(prints) + "\n").encode() if n == "fingerprints" else d)
                           for n, d in fields])


def test_load_failure_of_any_kind_is_reported_once_removed_and_rebuilt(tmp_path):
    m = _model(0)
    want, _ = _compile_run(m, tmp_path)
    (entry,) = _entries(tmp_path)
    path = tmp_path / entry
    path.write_bytes(_fingerprint_past_size_t(path.read_bytes()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, rep = _compile_run(m, tmp_path)
    msgs = [str(w.message) for w in caught if "updraft" in str(w.message)]
    assert len(msgs) == 1 and "[updraft.cache]" in msgs[0] and "unusable" in msgs[0], msgs
    assert rep.partitions[0].status == "ok", str(rep)  # the engine runs it, not PyTorch
    assert rep.partitions[0].cache.startswith("rebuilt") and rep.partitions[0].cache.endswith("stored")
    assert torch.equal(got, want)
    _, rep = _compile_run(m, tmp_path)
    assert rep.partitions[0].cache == "hit"


def test_disk_cache_get_applies_the_same_checks(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    cache.put("k", b"entry bytes")
    assert cache.get("k") == b"entry bytes"
    os.chmod(cache.path("k"), 0o660)
    with pytest.raises(PermissionError, match=r"writable by other users \(mode 0660\)"):
        cache.get("k")
    os.replace(cache.path("k"), tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", cache.path("k"))
    with pytest.raises(OSError):  # O_NOFOLLOW: ELOOP
        cache.get("k")
    assert cache.entries() == []  # neither the link nor the file it points to is an entry
