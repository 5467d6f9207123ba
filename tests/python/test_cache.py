"""The persistent compile cache (updraft/cache.py, docs/format.md): hits across compiles and
processes, stored folded constants mapped for the same weights and replayed for a new
checkpoint, defective entries rebuilt with one warning, atomic writes from two processes, the
size bound, private files, and the key."""
import os
import stat
import struct
import subprocess
import sys
import textwrap
import warnings

import threading
import time

import pytest
import torch

import updraft
from updraft import _C as C
from updraft.cache import DiskCache, entry_params, partition_key, wait_for_writes


class ConvBnNet(torch.nn.Module):
    """conv + batch norm (folded into the conv: a recorded fold of its per-channel scale and
    bias) + linear with bias. The conv has no bias of its own, as in ResNets: the folds (scale
    and bias, 2 x 8 floats) are then half the bytes of the statistics they come from, so the
    entry stores them (docs/format.md)."""

    def __init__(self, channels=8):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(channels)
        self.fc = torch.nn.Linear(channels * 6 * 6, 10)
        with torch.no_grad():  # non-trivial running statistics
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1)) * 0.5


def _model(seed, channels=8):
    torch.manual_seed(seed)
    return ConvBnNet(channels).eval()


X = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(7))


def _compile_run(model, cache_dir, **opts):
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend="updraft", options={"cache_dir": str(cache_dir), **opts})(X)
    wait_for_writes()  # entries are stored on a background thread
    return out, updraft.last_report()


def _entries(d):
    return sorted(p for p in os.listdir(d) if p.endswith(".updraft"))


def test_another_pass_pipeline_misses(tmp_path, monkeypatch):
    """An entry optimised by a pipeline with a pass more or less (a build within one version)
    is not reused: the key holds the pipeline's pass names."""
    m = _model(0)
    _compile_run(m, tmp_path)
    names = C.pass_names()
    monkeypatch.setattr(C, "pass_names", lambda: names + ["a_new_pass"])
    _, rep = _compile_run(m, tmp_path)
    assert [p.cache for p in rep.partitions] == ["miss, stored"], str(rep)
    assert len(_entries(tmp_path)) == 2


def test_second_compile_hits_and_runs_bit_identical(tmp_path):
    m = _model(0)
    cold, rep = _compile_run(m, tmp_path)
    assert [p.cache for p in rep.partitions] == ["miss, stored"], str(rep)
    warm, rep = _compile_run(m, tmp_path)
    assert [p.cache for p in rep.partitions] == ["hit"], str(rep)
    # Same weights: their fingerprints match, so the stored folded constants are used as they are.
    assert rep.partitions[0].cache_folds == "mapped" and "(folds mapped)" in str(rep)
    assert rep.cache_hits == 1 and "compile cache: 1 hit(s)" in str(rep)
    assert torch.equal(warm, cold)
    with torch.no_grad():
        torch.testing.assert_close(warm, m(X), rtol=1e-4, atol=1e-5)  # f32: oneDNN vs ATen order
    assert len(_entries(tmp_path)) == 1


def test_files_are_private(tmp_path):
    d = tmp_path / "cache"
    _compile_run(_model(0), d)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    (entry,) = _entries(d)
    assert stat.S_IMODE(os.stat(d / entry).st_mode) == 0o600


def test_new_checkpoint_hits_and_is_refit(tmp_path):
    _compile_run(_model(0), tmp_path)
    other = _model(1)  # same architecture, other weights and statistics
    got, rep = _compile_run(other, tmp_path)
    assert [p.cache for p in rep.partitions] == ["hit"], str(rep)
    # Other fingerprints: the stored folded constants are not used, the recipes are replayed.
    assert rep.partitions[0].cache_folds == "replayed", str(rep)
    uncached, _ = _compile_run(other, "")
    assert torch.equal(got, uncached)  # refit replays the folds with the same kernels
    with torch.no_grad():
        torch.testing.assert_close(got, other(X), rtol=1e-4, atol=1e-5)


def test_weights_changed_in_one_element_are_replayed(tmp_path):
    """One float of one batch-norm statistic differs: the fingerprint sees it."""
    _compile_run(_model(0), tmp_path)
    m = _model(0)
    with torch.no_grad():
        m.bn.running_var[3] += 0.25
    got, rep = _compile_run(m, tmp_path)
    assert rep.partitions[0].cache == "hit" and rep.partitions[0].cache_folds == "replayed", str(rep)
    uncached, _ = _compile_run(m, "")
    assert torch.equal(got, uncached)
    with torch.no_grad():
        torch.testing.assert_close(got, m(X), rtol=1e-4, atol=1e-5)


def test_folds_too_large_for_the_bound_are_not_stored_and_replayed(tmp_path):
    """Folded values are stored only when they take at most a quarter of cache_max_bytes."""
    m = _model(0, channels=256)  # 2 KB of folds (scale and bias)
    _compile_run(m, tmp_path / "probe")
    (probe,) = _entries(tmp_path / "probe")
    raw = (tmp_path / "probe" / probe).read_bytes()
    folded = sum(len(v) for n, v in _fields(raw)[1] if n.startswith("d"))
    bound = len(raw) - folded + 256  # the entry fits without its folds, which exceed a quarter
    assert 4 * folded > bound, (folded, bound)
    cold, _ = _compile_run(m, tmp_path, cache_max_bytes=bound)
    (entry,) = _entries(tmp_path)
    _, fields = _fields((tmp_path / entry).read_bytes())
    names = [n for n, _ in fields]
    assert "init" in names and not any(n.startswith("d") for n in names), names
    warm, rep = _compile_run(m, tmp_path, cache_max_bytes=bound)
    assert rep.partitions[0].cache == "hit" and rep.partitions[0].cache_folds == "replayed", str(rep)
    assert torch.equal(warm, cold)
    with torch.no_grad():
        torch.testing.assert_close(warm, m(X), rtol=1e-4, atol=1e-5)


def test_stored_folds_are_aligned_and_fingerprinted(tmp_path):
    m = _model(0)
    _compile_run(m, tmp_path)
    (entry,) = _entries(tmp_path)
    raw = (tmp_path / entry).read_bytes()
    _, fields = _fields(raw)
    fd = dict(fields)
    folded = [n for n in fd if n.startswith("d")]
    assert folded, list(fd)
    for n in folded + [n for n in fd if n.startswith("b")]:
        data_at = raw.index(fd[n]) + fd[n].index(b"\n") + 1
        assert data_at % 64 == 0, (n, data_at)
    # One line per parameter the folds read: the batch norm's four (the conv weight is used in
    # place: its scale is applied when the kernel prepacks it).
    prints = dict(line.split() for line in fd["fingerprints"].decode().splitlines())
    assert len(prints) == 4
    params = dict(m.named_parameters()) | dict(m.named_buffers())
    digests = {f"{_xxh3(t.detach().numpy().tobytes()):016x}" for t in params.values()}
    assert set(prints.values()) <= digests


_M64 = (1 << 64) - 1
_P32_1, _P32_2, _P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
_P64_1, _P64_2, _P64_3, _P64_4, _P64_5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                                          0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671fcb79e64eccc0e578825ad07dccff7221"
    "b8084674f743248ee03590e6813a264c3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364eac5ac8334d3ebc3c581a0fffa1363eb"
    "170ddd51b7f0da49d316552629d4689e2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")


def _le(b, at, size=8):
    return int.from_bytes(b[at:at + size], "little")


def _fold_mul(a, b):
    m = a * b
    return (m ^ (m >> 64)) & _M64


def _avalanche(h, shift=37, prime=0x165667919E3779F9):
    h ^= h >> shift
    h = h * prime & _M64
    return h ^ (h >> 32)


def _avalanche64(h):
    h ^= h >> 33
    h = h * _P64_2 & _M64
    h ^= h >> 29
    h = h * _P64_3 & _M64
    return h ^ (h >> 32)


def _mix16(b, at, s):
    return _fold_mul(_le(b, at) ^ _le(_SECRET, s), _le(b, at + 8) ^ _le(_SECRET, s + 8))


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _xxh3(b):
    """XXH3-64 (seed 0, default secret) as docs/format.md names it (xxHash's doc/xxhash_spec.md),
    written out for the test apart from src/core/hash.cpp."""
    n = len(b)
    if n == 0:
        return _avalanche64(_le(_SECRET, 56) ^ _le(_SECRET, 64))
    if n <= 3:
        c = (b[0] << 16) | (b[n >> 1] << 24) | b[-1] | (n << 8)
        return _avalanche64(c ^ (_le(_SECRET, 0, 4) ^ _le(_SECRET, 4, 4)))
    if n <= 8:
        x = ((_le(b, 0, 4) << 32) | _le(b, n - 4, 4)) ^ (_le(_SECRET, 8) ^ _le(_SECRET, 16))
        x ^= _rotl(x, 49) ^ _rotl(x, 24)
        x = x * 0x9FB21C651E98DF25 & _M64
        x ^= (x >> 35) + n
        x = x * 0x9FB21C651E98DF25 & _M64
        return x ^ (x >> 28)
    if n <= 16:
        lo = _le(b, 0) ^ (_le(_SECRET, 24) ^ _le(_SECRET, 32))
        hi = _le(b, n - 8) ^ (_le(_SECRET, 40) ^ _le(_SECRET, 48))
        swapped = int.from_bytes(lo.to_bytes(8, "little"), "big")
        return _avalanche((n + swapped + hi + _fold_mul(lo, hi)) & _M64)
    acc = n * _P64_1 & _M64
    if n <= 128:
        for i in range((n - 1) // 32 + 1):
            acc += _mix16(b, 16 * i, 32 * i) + _mix16(b, n - 16 * (i + 1), 32 * i + 16)
        return _avalanche(acc & _M64)
    if n <= 240:
        acc = _avalanche(sum((_mix16(b, 16 * i, 16 * i) for i in range(8)), acc) & _M64)
        acc += sum(_mix16(b, 16 * i, 16 * (i - 8) + 3) for i in range(8, n // 16)) + _mix16(b, n - 16, 119)
        return _avalanche(acc & _M64)
    lanes = [_P32_3, _P64_1, _P64_2, _P64_3, _P64_4, _P32_2, _P64_5, _P32_1]

    def stripe(at, s):
        for i in range(8):
            d = _le(b, at + 8 * i)
            k = d ^ _le(_SECRET, s + 8 * i)
            lanes[i ^ 1] = (lanes[i ^ 1] + d) & _M64
            lanes[i] = (lanes[i] + (k & 0xFFFFFFFF) * (k >> 32)) & _M64

    blocks = (n - 1) // 1024
    for blk in range(blocks):
        for st in range(16):
            stripe(blk * 1024 + 64 * st, 8 * st)
        for i in range(8):
            a = lanes[i] ^ (lanes[i] >> 47) ^ _le(_SECRET, 128 + 8 * i)
            lanes[i] = a * _P32_1 & _M64
    for st in range((n - 1 - blocks * 1024) // 64):
        stripe(blocks * 1024 + 64 * st, 8 * st)
    stripe(n - 64, 121)
    h = n * _P64_1
    for i in range(4):
        h += _fold_mul(lanes[2 * i] ^ _le(_SECRET, 11 + 16 * i), lanes[2 * i + 1] ^ _le(_SECRET, 19 + 16 * i))
    return _avalanche(h & _M64)


def test_xxh3_reference_values():
    """Reference values from xxHash's own XXH3_64bits; lengths cover every path of the spec."""
    assert _xxh3(b"") == 0x2D06800538D394C2
    assert _xxh3(b"a") == 0xE6C632B61E964E1F
    assert _xxh3(b"Nobody inspects the spammish repetition") == 0x6CB00603B5CC47E9
    buf = bytes((i * 31 + 7) & 0xFF for i in range(4103))
    want = {3: 0x15F7093B173D005C, 8: 0xDEC6A9A43575982E, 16: 0x7E484C18D74895D0, 100: 0x8C97158042FBF926,
            200: 0x12FDB864685F344D, 240: 0xCCC7375172C41F03, 241: 0x0B3B630948CE4A00,
            1024: 0x23BC880EBF0D29C6, 1025: 0xC09FDFBC398C7D82, 4103: 0xAD0017645A159DB5}
    assert {n: _xxh3(buf[:n]) for n in want} == want


def _fields(raw):
    """The entry's fields, read as docs/format.md describes them."""
    magic, version, n, length, checksum = struct.unpack_from("<8sIIQQ", raw)
    assert magic == b"UPDRAFTE" and length == len(raw) - 32 and checksum == _xxh3(raw[32:])
    fields, at = [], 32
    for _ in range(n):
        (nlen,) = struct.unpack_from("<I", raw, at)
        name = raw[at + 4:at + 4 + nlen].decode()
        (dlen,) = struct.unpack_from("<Q", raw, at + 4 + nlen)
        start = at + 12 + nlen
        fields.append((name, raw[start:start + dlen]))
        at = start + dlen
    return version, fields


def _pack(version, fields):
    payload = b"".join(struct.pack("<I", len(n)) + n.encode() + struct.pack("<Q", len(d)) + d for n, d in fields)
    return struct.pack("<8sIIQQ", b"UPDRAFTE", version, len(fields), len(payload), _xxh3(payload)) + payload


def _other_engine(raw):
    version, fields = _fields(raw)
    return _pack(version, [(n, b"0.0.1" if n == "engine" else d) for n, d in fields])


def _flip_in_field(raw, name):
    """One bit flipped in the last data byte of field `name` (a stored folded constant)."""
    _, fields = _fields(raw)
    data = dict(fields)[name]
    at = raw.index(data) + len(data) - 1
    return raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1:]


DEFECTS = {
    "flipped byte": lambda raw: raw[:len(raw) // 2] + bytes([raw[len(raw) // 2] ^ 0x10]) + raw[len(raw) // 2 + 1:],
    "truncated": lambda raw: raw[:len(raw) * 2 // 3],
    "empty": lambda raw: b"",
    "other format version": lambda raw: raw[:8] + struct.pack("<I", 99) + raw[12:],
    "format version 1": lambda raw: raw[:8] + struct.pack("<I", 1) + raw[12:],  # before stored folds
    "format version 2": lambda raw: raw[:8] + struct.pack("<I", 2) + raw[12:],  # XXH64 checksums
    "format version 3": lambda raw: raw[:8] + struct.pack("<I", 3) + raw[12:],  # no size inputs
    "flipped folded value": lambda raw: _flip_in_field(raw, "d1"),
    "other engine version": _other_engine,
    "not an entry": lambda raw: b"#!/bin/sh\necho hello\n" * 10,
}
REASONS = {"flipped byte": "corrupt", "truncated": "truncated", "empty": "not an updraft cache entry",
           "other format version": "format version 99", "other engine version": "written by engine 0.0.1",
           "format version 1": "format version 1, this engine reads version 4",
           "format version 2": "format version 2, this engine reads version 4",
           "format version 3": "format version 3, this engine reads version 4", "flipped folded value": "corrupt",
           "not an entry": "not an updraft cache entry"}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_defective_entry_warns_once_and_is_rebuilt(tmp_path, defect):
    m = _model(0)
    want, _ = _compile_run(m, tmp_path)
    (entry,) = _entries(tmp_path)
    path = tmp_path / entry
    path.write_bytes(DEFECTS[defect](path.read_bytes()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, rep = _compile_run(m, tmp_path)
    msgs = [str(w.message) for w in caught if "[updraft.cache]" in str(w.message)]
    assert len(msgs) == 1 and "unusable" in msgs[0] and REASONS[defect] in msgs[0], msgs
    assert rep.partitions[0].cache.startswith("rebuilt") and rep.partitions[0].cache.endswith("stored")
    assert torch.equal(got, want)
    C.read_entry_meta(path.read_bytes())  # rewritten whole
    _, rep = _compile_run(m, tmp_path)
    assert rep.partitions[0].cache == "hit"


def test_background_write_is_atomic_and_waited_for(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    release, done = threading.Event(), []

    def make():
        release.wait(timeout=60)
        return b"entry bytes"

    cache.put_async("k", make, done.append)
    time.sleep(0.05)
    assert _entries(tmp_path) == [] and not done  # nothing visible while it is being made
    release.set()
    assert cache.lookup("k") == cache.path("k")  # a lookup of a key being written waits for it
    wait_for_writes()
    assert done == [None] and cache.get("k") == b"entry bytes"
    assert sorted(os.listdir(tmp_path)) == ["k.updraft"]  # no temporary file left


def test_background_write_failure_is_reported_and_leaves_nothing(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    done = []

    def make():
        raise OSError("disk full")

    cache.put_async("k", make, done.append)
    wait_for_writes()
    assert len(done) == 1 and isinstance(done[0], OSError)
    assert os.listdir(tmp_path) == []


def test_stale_temporary_files_are_removed(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    stale, fresh = tmp_path / ".0123456789abcdef.x1.tmp", tmp_path / ".0123456789abcdef.x2.tmp"
    stale.write_bytes(b"half an entry")
    fresh.write_bytes(b"being written")
    os.utime(stale, (time.time() - 2 * 3600,) * 2)  # a writer that died two hours ago
    cache.put("k", b"x")
    assert not stale.exists() and fresh.exists()


_EXIT_WORKER = textwrap.dedent("""
    import sys, torch, updraft
    sys.path.insert(0, {here!r})
    from test_cache import _model, X
    with torch.no_grad():
        torch.compile(_model(0), backend="updraft", options={{"cache_dir": {d!r}}})(X)
    # exits at once: the interpreter waits for the background write
""")


def test_process_exiting_right_after_compile_leaves_a_whole_entry(tmp_path):
    code = _EXIT_WORKER.format(here=os.path.dirname(__file__), d=str(tmp_path))
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    assert sorted(os.listdir(tmp_path)) == _entries(tmp_path) and len(_entries(tmp_path)) == 1
    C.read_entry_meta((tmp_path / _entries(tmp_path)[0]).read_bytes())
    _, rep = _compile_run(_model(0), tmp_path)
    assert rep.partitions[0].cache == "hit" and rep.partitions[0].cache_folds == "mapped"


def test_size_bound_evicts_least_recently_used(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=2500)
    for i in range(4):
        cache.put(f"k{i}", bytes(1000))
        os.utime(cache.path(f"k{i}"), (1000 + i, 1000 + i))  # k0 oldest
    assert cache.get("k0") is None and cache.get("k1") is None
    assert cache.get("k3") is not None and sum(s for _, s, _ in cache.entries()) <= 2500


def test_cache_dir_from_environment_and_off_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDRAFT_CACHE_DIR", str(tmp_path / "env"))
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(_model(0), backend="updraft")(X)
    wait_for_writes()
    assert len(_entries(tmp_path / "env")) == 1
    _, rep = _compile_run(_model(0), "")  # cache_dir="" turns it off despite the variable
    assert rep.partitions[0].cache == ""
    with pytest.raises(TypeError, match=r"\[updraft.config\] cache_dir"):
        updraft.CompilerConfig(cache_dir=3)


def test_unwritable_cache_dir_warns_and_compiles(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, rep = _compile_run(_model(0), blocker / "cache")
    assert any("cannot create the cache folder" in str(w.message) for w in caught)
    assert rep.partitions[0].status == "ok" and rep.partitions[0].cache.startswith("off")


def test_key_covers_what_decides_the_graph_but_not_weights():
    class M:
        def __init__(self, dtype, shape):
            self.dtype, self.shape = dtype, shape

    def params(*tensors):
        return entry_params(tensors, list(range(len(tensors)))).text

    runtime = [(0, "runtime", (M(torch.float32, (2, 3)), None))]
    args = ("code", runtime, params(torch.zeros(3)), {"fuse": True}, "0.2.0", "avx2")
    base = partition_key(*args)
    assert partition_key(args[0], runtime, params(torch.ones(3)), *args[3:]) == base  # weights
    assert partition_key("code2", *args[1:]) != base
    assert partition_key("cod\u00e9", *args[1:]) != partition_key("cod\u00e8", *args[1:])  # non-ASCII code
    assert partition_key(args[0], [(0, "runtime", (M(torch.float64, (2, 3)), None))], *args[2:]) != base
    # an input taken in its memory order (a transposed view) is another engine input
    assert partition_key(args[0], [(0, "runtime", (M(torch.float32, (2, 3)), (1, 0)))], *args[2:]) != base
    assert partition_key(args[0], runtime, params(torch.zeros(4)), *args[3:]) != base  # shape
    assert partition_key(args[0], runtime, params(torch.zeros(3, dtype=torch.float64)), *args[3:]) != base
    assert partition_key(args[0], runtime, params(torch.zeros(3), torch.zeros(3)), *args[3:]) != base
    assert partition_key(*args[:3], {"fuse": False}, *args[4:]) != base
    assert partition_key(*args[:4], "0.2.1", "avx2") != base
    lit = [(1, "literal", torch.zeros(3))]
    assert partition_key(args[0], lit, *args[2:]) != partition_key(
        args[0], [(1, "literal", torch.ones(3))], *args[2:])  # literal values count


def test_text_digest_is_xxh3_of_the_utf8_bytes():
    # XXH3-64 reference values (docs/format.md); the code enters the key through it (scheme 4).
    assert C.text_digest("") == "2d06800538d394c2"
    assert C.text_digest("a") == "e6c632b61e964e1f"
    for text in ("caf\u00e9 \u4e2d", "x" * 1000, "graph():\n" * 300):  # short, mid and long inputs
        assert C.text_digest(text) == f"{_xxh3(text.encode()):016x}"


def test_entry_params_read_parameters_in_one_pass():
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    strided = torch.zeros(2, 3).t()  # not contiguous: bound as a contiguous copy
    args = (torch.zeros(5), w, 7, strided, torch.zeros(2, dtype=torch.complex64), torch.tensor(1.5),
            torch.nn.Parameter(torch.ones(2, dtype=torch.float16)))
    p = entry_params(args, [1, 2, 3, 4, 5, 6])
    # Index, engine dtype (torch's name where the engine has none) and shape; not the values.
    assert p.text == "1 f32 3,4\n2 other int\n3 f32 3,2\n4 torch.complex64 2\n5 f32 \n6 f16 2\n"
    assert p.tensors == 5
    assert entry_params(args, []).text == ""


def test_parameter_on_another_device_is_keyed_by_it_and_never_bound():
    """A parameter that is not on the CPU (here the meta device; CUDA in a CUDA build) gets
    its device in the key, so it never finds a CPU compile's entry, and is not bound: a load
    that needs it fails with a clear error instead of reading a device pointer."""
    cpu, meta = torch.zeros(3, 4), torch.zeros(3, 4, device="meta")
    assert entry_params((meta,), [0]).text == "0 device meta\n"
    assert entry_params((meta,), [0]).text != entry_params((cpu,), [0]).text
    g = C.Graph()
    x = g.add_input("x", "f32", [3, 4])
    w = g.add_constant("w", cpu, source=1)
    g.set_outputs(g.add_node("add", [x, w]))
    cg = C.compile(g, {})
    entry = C.save_entry(cg, "k", "test")
    C.load_entry(entry, "k", entry_params((None, cpu), [1]))  # the CPU parameter binds
    with pytest.raises(C.UpdraftError, match="needs parameter 1, which the caller did not give"):
        C.load_entry(entry, "k", entry_params((None, meta), [1]))


def test_hit_refreshes_an_old_entry_and_leaves_a_recent_one(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    cache.put("old", b"x")
    cache.put("new", b"y")
    two_hours = time.time() - 2 * 3600
    os.utime(cache.path("old"), (two_hours, two_hours))
    recent = time.time() - 5
    os.utime(cache.path("new"), (recent, recent))
    assert cache.lookup("old") == cache.path("old") and cache.lookup("new") == cache.path("new")
    assert cache.path("old").stat().st_mtime > time.time() - 60  # now the most recently used
    assert cache.path("new").stat().st_mtime == pytest.approx(recent)  # recent enough: not written
    assert cache.lookup("missing") is None


_WORKER = textwrap.dedent("""
    import sys, torch, updraft
    sys.path.insert(0, {here!r})
    from test_cache import _model, X
    with torch.no_grad():
        out = torch.compile(_model(0), backend="updraft", options={{"cache_dir": {d!r}}})(X)
    rep = updraft.last_report()
    print(rep.partitions[0].cache, float(out.double().sum()))
""")


def test_two_processes_compiling_at_once_leave_one_valid_entry(tmp_path):
    code = _WORKER.format(here=os.path.dirname(__file__), d=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    sums = {o.split()[-1] for o, _ in outs}
    assert len(sums) == 1
    (entry,) = _entries(tmp_path)
    C.read_entry_meta((tmp_path / entry).read_bytes())
    # A third process now hits.
    out, _ = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True).communicate(timeout=300)
    assert out.startswith("hit") and out.split()[-1] in sums


_WRITER = textwrap.dedent("""
    import sys
    from updraft.cache import DiskCache
    cache = DiskCache({d!r}, 1 << 30)
    data = open({src!r}, "rb").read()
    for i in range(40):
        cache.put("same", data)
""")


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    _compile_run(_model(0), tmp_path / "src")
    (entry,) = _entries(tmp_path / "src")
    src = str(tmp_path / "src" / entry)
    d = tmp_path / "race"
    d.mkdir()
    code = _WRITER.format(d=str(d), src=src)
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    reads = 0
    while any(p.poll() is None for p in procs):
        try:
            raw = (d / "same.updraft").read_bytes()
        except FileNotFoundError:
            continue
        C.read_entry_meta(raw)  # raises on a partial file
        reads += 1
    assert all(p.returncode == 0 for p in procs)
    assert not [p for p in os.listdir(d) if p.endswith(".tmp")]  # no temporary files left
    C.read_entry_meta((d / "same.updraft").read_bytes())
