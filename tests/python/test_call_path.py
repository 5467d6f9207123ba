"""The per-call path of an engine partition: after a shape signature's first call, calls go
through a bound plan with raw data pointers (PlannedCall), strided inputs with their strides.
Inputs it cannot vouch for (another dtype) take the general DLPack path, and results stay right
either way. The graphs run
with inference="engine": these tests count engine calls, which the default's timing against
eager (CompilerConfig.inference) would share with PyTorch over the first calls."""
import warnings

import pytest
import torch

from updraft import CompilerConfig, get_backend
from updraft import engine_partition as part_mod


@pytest.fixture
def partitions(monkeypatch):
    made = []
    init = part_mod.EnginePartition.__init__

    def record(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(part_mod.EnginePartition, "__init__", record)
    return made


class _Boom:
    """Stands in for a PlannedCall that must not be used."""

    def run(self, *a):
        raise AssertionError("the pointer path ran inputs it cannot vouch for")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()


def test_repeated_calls_use_the_bound_plan_and_fresh_outputs(partitions):
    m = _mlp()
    x = torch.randn(2, 16)
    with torch.no_grad():
        f = torch.compile(m, backend=get_backend(CompilerConfig(num_threads=1, inference="engine")))
        outs = [f(x) for _ in range(4)]
        want = m(x)
    (p,) = partitions
    assert len(p._state.calls) == 1  # one signature, bound after its first call
    (key, (planned, outs_meta)), = p._state.calls.items()
    ran = []

    class Counting:
        def run(self, *a):
            ran.append(1)
            planned.run(*a)

    p._state.calls[key] = (Counting(), outs_meta)
    with torch.no_grad():
        torch.testing.assert_close(f(x), want)
    assert ran == [1]
    for o in outs:
        torch.testing.assert_close(o, want)
    assert len({o.data_ptr() for o in outs}) == len(outs)  # each call returns its own tensor


def _partition_args(p, f, *x) -> list:
    """The arguments partition `p` receives when the compiled `f` is called on `x`."""
    captured = {}
    fwd = p.forward

    def spy(*args):
        captured["args"] = args
        return fwd(*args)

    p.forward = spy
    try:
        f(*x)
    finally:
        p.forward = fwd
    return list(captured["args"])


def test_strided_inputs_run_by_pointer_with_their_strides(partitions):
    m = _mlp()
    with torch.no_grad():
        f = torch.compile(m, backend=get_backend(CompilerConfig(num_threads=1, inference="engine")), dynamic=False)
        x = torch.randn(3, 16)
        f(x)
        f(x)
        (p,) = partitions
        # Call the partition itself with strided runtime inputs of the bound shape: a transpose,
        # broadcast rows (stride 0), and a view at a storage offset with padded rows. They go
        # through the bound plan with their strides, and the plan packs them.
        sub_args = _partition_args(p, f, x)
        j = p._state.runtime_pos[0]
        key = (x.shape,)
        planned, meta = p._state.calls[key]
        seen = []

        class Recording:
            def run(self, ptrs, outs, strides=()):
                seen.append(list(strides))
                planned.run(ptrs, outs, strides)

        p._state.calls[key] = (Recording(), meta)
        for other in (torch.randn(16, 3).t(), torch.randn(1, 16).expand(3, 16), torch.randn(3, 20)[:, 2:18]):
            assert not other.is_contiguous()
            sub_args[j] = other
            torch.testing.assert_close(p.forward(*sub_args), m(other))
            assert seen.pop() == [(0, other.stride())]


def test_wrong_dtype_on_a_bound_signature_is_never_run_by_pointer(partitions):
    m = _mlp()
    with torch.no_grad():
        f = torch.compile(m, backend=get_backend(CompilerConfig(num_threads=1, inference="engine")), dynamic=False)
        x = torch.randn(2, 16)
        f(x)
        f(x)
        (p,) = partitions
        args = _partition_args(p, f, x)
        j = p._state.runtime_pos[0]
        key = (x.shape,)
        p._state.calls[key] = (_Boom(), p._state.calls[key][1])
        args[j] = x.double()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                got = p.forward(*args)
            except RuntimeError:
                return  # eager itself may refuse mixed dtypes; what matters is no pointer run
        # The engine refuses the dtype (general path), the partition falls back to PyTorch.
        torch.testing.assert_close(got, p.sub(*args))


def test_a_new_signature_binds_once_and_runs_by_pointer(partitions, monkeypatch):
    # A growing dim (a decode step's KV length) makes a new signature per call: each must cost
    # one plan lookup (Executable.planned), not prepare + a DLPack run + a bind.
    from updraft import _C

    m = _mlp()
    seen = {"planned": 0, "prepare": 0, "run": 0}
    for name in seen:
        orig = getattr(_C.Executable, name)

        def counted(self, *a, _orig=orig, _name=name, **k):
            seen[_name] += 1
            return _orig(self, *a, **k)
        monkeypatch.setattr(_C.Executable, name, counted)
    with torch.no_grad():
        f = torch.compile(m, backend=get_backend(CompilerConfig(num_threads=1, inference="engine")), dynamic=True)
        f(torch.randn(2, 16))
        (p,) = partitions
        base = dict(seen)
        n_new = part_mod._MAX_BOUND_PLANS + 4
        for n in range(3, 3 + n_new):
            x = torch.randn(n, 16)
            torch.testing.assert_close(f(x), m(x))
    assert seen["planned"] - base["planned"] == n_new
    assert seen["prepare"] == base["prepare"] and seen["run"] == base["run"]
    # The bound calls stay bounded however many sizes ran, and still serve a recent one.
    assert len(p._state.calls) == part_mod._MAX_BOUND_PLANS
    assert not hasattr(p._state, "shapes")
    x = torch.randn(2 + n_new, 16)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))
    assert seen["planned"] - base["planned"] == n_new


def test_frozen_parameter_check_sees_identity_and_in_place_writes():
    # _C.frozen_unchanged, the per-call check of a graph's frozen parameters
    # (backend.PartitionedGraph): each (index, tensor, version) must still hold for the call.
    from updraft import _C

    a, b = torch.zeros(3), torch.ones(2)
    args = [torch.randn(4), a, b]
    bound = [(1, a, a._version), (2, b, b._version)]
    assert _C.frozen_unchanged(args, bound) and _C.frozen_unchanged(tuple(args), bound)
    assert not _C.frozen_unchanged([args[0], b, a], bound)  # other tensors at those places
    assert not _C.frozen_unchanged(args[:2], bound)  # fewer arguments than the set was built with
    b.mul_(2)  # written in place: its version moved
    assert not _C.frozen_unchanged(args, bound)
    assert _C.frozen_unchanged(args, [])
    with pytest.raises(Exception, match="index, tensor, version"):
        _C.frozen_unchanged(args, [(1, a)])


def test_frozen_check_compares_the_bytes_of_a_snapshot_entry():
    # An entry (index, tensor, version, snapshot) also needs the tensor's bytes equal to the
    # snapshot's: batch norm's running statistics change under a train-mode forward without a
    # version bump (backend._running_stats_inputs).
    from updraft import _C

    def entry(i, t):
        snapshot = t.clone()
        return (i, t, t._version, snapshot, snapshot.data_ptr(), snapshot.nbytes)

    stats = torch.randn(8)
    args = [torch.randn(4), stats]
    bound = [entry(1, stats)]
    assert _C.frozen_unchanged(args, bound)
    version = stats._version
    torch.nn.functional.batch_norm(torch.randn(4, 8), stats, torch.ones(8), training=True, momentum=0.5)
    assert stats._version == version  # the kernel wrote it in place and left the version alone
    assert not _C.frozen_unchanged(args, bound)  # the bytes tell
    assert _C.frozen_unchanged(args, [entry(1, stats)])
    nan = torch.full((3,), float("nan"))  # bytes, not values: NaN == NaN here
    assert _C.frozen_unchanged([nan], [entry(0, nan)])
    with pytest.raises(Exception, match="snapshot"):
        _C.frozen_unchanged(args, [(1, stats, stats._version, stats.clone())])


def test_memory_order_of_dense_views():
    from updraft.lowerer import memory_order

    x = torch.randn(2, 3, 4, 5)
    assert memory_order(x) is None  # contiguous
    assert memory_order(torch.randn(5, 4).t()) == (1, 0)
    assert memory_order(x.to(memory_format=torch.channels_last)) == (0, 2, 3, 1)
    assert memory_order(x.permute(0, 2, 1, 3)) == (0, 2, 1, 3)
    # size-1 dims take any stride: a transpose that moves only them is still contiguous
    assert memory_order(torch.randn(3, 1, 4).permute(1, 0, 2)) is None
    assert memory_order(torch.randn(4, 1, 3).permute(2, 1, 0)) is not None
    for strided in (torch.randn(1, 5).expand(4, 5),   # overlapping (stride 0)
                    torch.randn(4, 8)[:, ::2],        # gaps
                    torch.randn(4, 8)[:, 2:6].t(),    # a transposed slice
                    torch.randn(0, 3).t()):           # empty
        assert memory_order(strided) is None, strided.stride()


@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_permuted_inputs_enter_in_memory_order(partitions, layout):
    # A dense permuted input (a transposed matrix, a channels-last image) is the engine input in
    # its memory order, permuted back inside the graph: the plan packs no copy of it, and the
    # partition falls back to packing when a call brings another layout.
    torch.manual_seed(0)
    if layout == "transposed":
        def f(a, b):
            return (a @ b).relu() + a.sum(1, keepdim=True)

        x, b = torch.randn(24, 16).t(), torch.randn(24, 24)
        mod = f
    else:
        conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
        x = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last)
        mod = conv
    args = (x, b) if layout == "transposed" else (x,)
    with torch.no_grad():
        g = torch.compile(mod, backend=get_backend(CompilerConfig(num_threads=1, inference="engine")), dynamic=False)
        torch.testing.assert_close(g(*args), mod(*args), rtol=1e-5, atol=1e-5)
        (p,) = partitions
        st = p._state
        assert [o for o in st.orders if o is not None] == [(1, 0) if layout == "transposed" else (0, 2, 3, 1)]
        key = next(iter(st.calls))
        planned, meta = st.calls[key]
        seen = []

        class Recording:
            def run(self, ptrs, outs, strides=()):
                seen.append(list(strides))
                planned.run(ptrs, outs, strides)

        st.calls[key] = (Recording(), meta)
        torch.testing.assert_close(g(*args), mod(*args), rtol=1e-5, atol=1e-5)
        assert seen == [[]]  # every input contiguous in the engine's order
        # The partition called with the input in another layout: packed, still right.
        sub_args = _partition_args(p, g, *args)
        j = st.runtime_pos[st.orders.index(next(o for o in st.orders if o is not None))]
        sub_args[j] = sub_args[j].contiguous()
        want = mod(*[a.contiguous() for a in args])
        got = p.forward(*sub_args)
        torch.testing.assert_close(got[0] if isinstance(got, tuple) else got, want, rtol=1e-5, atol=1e-5)
        assert seen[-1] and seen[-1][0][0] == st.runtime_pos.index(j)
