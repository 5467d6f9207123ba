"""torch's precompile with the updraft backend (updraft/precompile.py): aot_compile, save,
load_compiled_function in a fresh process; refusals; corrupt artifacts."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import updraft
from updraft import precompile
from updraft.precompile import PrecompileError, PrecompiledGraph

_PYTHONPATH = os.path.dirname(os.path.dirname(updraft.__file__))

# Saves in one process, loads and runs in another. The model classes live in the worker's
# __main__ in both processes, as a user's would live in their module.
_WORKER = textwrap.dedent('''
    import json, sys, time
    import updraft  # before torch: its OpenMP wait policy (updraft/__init__.py)
    import torch
    from updraft.precompile import serializable_guards

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(3))
            self.head = torch.nn.Linear(64, 10)

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return self.head(x), torch.sigmoid(x)  # two outputs

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            from transformers import BertConfig, BertModel
            self.bert = BertModel(BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                             intermediate_size=128, vocab_size=500))

        def forward(self, ids):
            return self.bert(ids).last_hidden_state

    def build(name, seed):
        torch.manual_seed(seed)
        model = {"mlp": MLP, "bert": Bert}[name]().eval()
        x = torch.randn(4, 64) if name == "mlp" else torch.randint(0, 500, (2, 16))
        return model, x

    def first(out):
        return out[0] if isinstance(out, tuple) else out

    mode, name, d = sys.argv[1:4]
    model, x = build(name, 0)
    if mode == "save":
        with torch.no_grad():
            fn = torch.compile(model.forward, backend="updraft", fullgraph=True,
                               options={"guard_filter_fn": serializable_guards}).aot_compile(((x,), {}))
            out = fn(model, x)
        fn.save_compiled_function(d + "/fn.bin")
        torch.save({"x": x, "out": out}, d + "/ref.pt")
    else:
        # What must not run on load: Dynamo tracing, the backend (AOTAutograd), the engine's passes.
        import updraft.backend
        from updraft import _C
        from torch._dynamo.utils import counters
        ran = []
        real_compile, real_backend = _C.compile, updraft.backend._compile
        _C.compile = lambda *a, **k: (ran.append("engine compile"), real_compile(*a, **k))[1]
        updraft.backend._compile = lambda *a, **k: (ran.append("backend"), real_backend(*a, **k))[1]
        ref = torch.load(d + "/ref.pt")
        t0 = time.perf_counter()
        with open(d + "/fn.bin", "rb") as f:
            fn = torch.compiler.load_compiled_function(f)
        with torch.no_grad():
            out = fn(model, ref["x"])
            eager = model(ref["x"])
            other, _ = build(name, 1)  # another instance, other weights: bound at its call
            out_other, eager_other = fn(other, ref["x"]), other(ref["x"])
        outs = out if isinstance(out, tuple) else (out,)
        refs = ref["out"] if isinstance(ref["out"], tuple) else (ref["out"],)
        eagers = eager if isinstance(eager, tuple) else (eager,)
        rep = updraft.last_report()
        print(json.dumps({
            "identical": all(torch.equal(a, b) for a, b in zip(outs, refs)) and len(outs) == len(refs),
            "eager_diff": max((a - b).abs().max().item() for a, b in zip(outs, eagers)),
            "other_diff": (first(out_other) - first(eager_other)).abs().max().item(),
            "partitions": [p.cache for g in rep.graphs for p in g.partitions],
            "seconds": time.perf_counter() - t0,
            "ran": ran + ["dynamo frame"] * counters["frames"]["total"],
        }))
''')


def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=_PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(cwd / "worker.py"), *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    return p.stdout


def _save_then_load(tmp_path, name):
    (tmp_path / "worker.py").write_text(_WORKER)
    _run(["save", name, str(tmp_path)], tmp_path)
    return json.loads(_run(["load", name, str(tmp_path)], tmp_path).strip().splitlines()[-1])


def test_mlp_saved_then_loaded_in_a_fresh_process(tmp_path):
    r = _save_then_load(tmp_path, "mlp")
    assert r["ran"] == [], r  # no Dynamo trace, no backend/AOTAutograd, no engine passes
    assert r["identical"], r  # bit-identical to the saving process's updraft call
    assert r["eager_diff"] < 1e-5, r
    assert r["other_diff"] < 1e-5, r  # parameters by reference: another instance's weights are used
    assert r["partitions"] and all(c == "precompiled" for c in r["partitions"]), r


@pytest.mark.slow
def test_small_bert_saved_then_loaded_in_a_fresh_process(tmp_path):
    r = _save_then_load(tmp_path, "bert")
    assert r["ran"] == [], r
    assert r["identical"], r
    assert r["eager_diff"] < 1e-4, r
    assert r["other_diff"] < 1e-4, r
    assert r["partitions"] and all(c == "precompiled" for c in r["partitions"]), r


# ---------------------------------------------------------------- in-process: refusals, corruption

class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _aot(model, x, **kw):
    return torch.compile(model.forward, backend="updraft", fullgraph=True, **kw).aot_compile(((x,), {}))


@pytest.fixture
def saved():
    model, x = _MLP().eval(), torch.randn(3, 16)
    with torch.no_grad():
        fn = _aot(model, x)
        out = fn(model, x)
    return model, x, out, PrecompiledGraph.serialize_compile_artifacts(fn._artifacts.compiled_fn)


def test_in_process_round_trip_matches(saved):
    model, x, out, data = saved
    assert data.startswith(precompile.MAGIC)
    loaded = PrecompiledGraph.deserialize_compile_artifacts(data)
    params = [model.a.weight, model.a.bias, x, model.b.weight, model.b.bias]  # Dynamo's input order
    with torch.no_grad():
        (got,) = loaded(*params)
    assert torch.equal(got, out)
    assert PrecompiledGraph.serialize_compile_artifacts(loaded) == data  # saving a loaded one again


def _flip(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0xFF
    return bytes(b)


def test_corrupt_artifacts_are_refused_with_a_clear_error(saved):
    _, _, _, data = saved
    header = precompile._HEADER.size
    cases = {
        "truncated": data[: header - 1],
        "no magic": b"X" + data[1:],
        "meta flipped": _flip(data, header + 5),
        "tail cut": data[:-10],
        "entry flipped": _flip(data, len(data) - 200),
    }
    for what, bad in cases.items():
        with pytest.raises(PrecompileError, match=r"\[updraft.precompile\]") as e:
            PrecompiledGraph.deserialize_compile_artifacts(bad)
        assert "compile it again" in str(e.value) or "format version" in str(e.value), what


def test_other_format_version_and_engine_are_refused(saved):
    _, _, _, data = saved
    magic, _, crc, n = precompile._HEADER.unpack_from(data)
    newer = precompile._HEADER.pack(magic, precompile.FORMAT_VERSION + 1, crc, n) + data[precompile._HEADER.size:]
    with pytest.raises(PrecompileError, match="format version"):
        PrecompiledGraph.deserialize_compile_artifacts(newer)
    meta, blobs = precompile._unpack(data)
    meta["engine"] = "0.0.0-other"
    with pytest.raises(PrecompileError, match="compiled by engine 0.0.0-other"):
        PrecompiledGraph.deserialize_compile_artifacts(precompile._pack(meta, [bytes(b) for b in blobs]))
    meta, _ = precompile._unpack(data)
    meta["cpu"] += " imaginary_isa"
    with pytest.raises(PrecompileError, match="imaginary_isa"):
        PrecompiledGraph.deserialize_compile_artifacts(precompile._pack(meta, [bytes(b) for b in blobs]))


def test_corrupt_file_through_torch_loader_is_an_error_not_a_crash(saved, tmp_path):
    model, x, _, _ = saved
    torch._dynamo.reset()
    with torch.no_grad():
        fn = _aot(model, x)
    path = tmp_path / "fn.bin"
    fn.save_compiled_function(str(path))
    data = path.read_bytes()
    at = data.index(precompile.MAGIC)
    path.write_bytes(_flip(data, at + precompile._HEADER.size + 3))  # inside our metadata
    with open(path, "rb") as f, pytest.raises(PrecompileError, match="checksum"):
        torch.compiler.load_compiled_function(f)


def _cause_chain(e):
    while e is not None:
        yield e
        e = e.__cause__ or e.__context__


def test_training_graph_is_refused():
    model, x = _MLP(), torch.randn(3, 16)  # grad on, parameters require grad
    with pytest.raises(Exception) as e:
        _aot(model, x)
    assert any(isinstance(c, PrecompileError) and "torch.no_grad()" in str(c) for c in _cause_chain(e.value)), e.value


def test_input_mutation_is_refused():
    class Mut(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)

        def forward(self, x):
            x.add_(1)
            return self.a(x)

    with torch.no_grad(), pytest.raises(Exception) as e:
        _aot(Mut().eval(), torch.randn(2, 4))
    assert any(isinstance(c, PrecompileError) and "mutates input" in str(c) for c in _cause_chain(e.value)), e.value


def test_graph_breaks_are_refused():
    model, x = _MLP().eval(), torch.randn(3, 16)
    with torch.no_grad(), pytest.raises(RuntimeError, match="fullgraph=True"):
        torch.compile(model.forward, backend="updraft").aot_compile(((x,), {}))


def test_gears_are_refused():
    model, x = _MLP().eval(), torch.randn(3, 16)
    backend = updraft.get_backend(updraft.CompilerConfig(gears=(updraft.Gear("x", 0, (4, 8)),)))
    with torch.no_grad(), pytest.raises(Exception) as e:
        torch.compile(model.forward, backend=backend, fullgraph=True).aot_compile(((x,), {}))
    assert any(isinstance(c, PrecompileError) and "gears" in str(c) for c in _cause_chain(e.value)), e.value


def test_plain_torch_compile_is_not_affected():
    model, x = _MLP().eval(), torch.randn(3, 16)
    with torch.no_grad():
        out = torch.compile(model, backend="updraft")(x)
        assert torch.allclose(out, model(x), atol=1e-5)
    assert not precompile.requested()


def test_input_guards_keep_input_shapes_and_grad_mode_but_not_parameters():
    model, x = _MLP().eval(), torch.randn(3, 16)
    with torch.no_grad():
        fn = _aot(model, x, options={"guard_filter_fn": precompile.input_guards})
        assert torch.allclose(fn(model, x), model(x), atol=1e-5)
        other = _MLP().eval()  # other weights: parameters are not guarded, they are bound at the call
        assert torch.allclose(fn(other, x), other(x), atol=1e-5)
        with pytest.raises(RuntimeError, match="GuardManager check failed"):
            fn(model, torch.randn(5, 16))  # the input's shape is guarded
    with pytest.raises(RuntimeError, match="GuardManager check failed"):
        fn(model, x)  # grad mode is guarded (an inference graph)


def test_dynamic_batch_round_trip(tmp_path):
    model, x = _MLP().eval(), torch.randn(3, 16)
    path = tmp_path / "fn.bin"
    with torch.no_grad():
        fn = torch.compile(model.forward, backend="updraft", fullgraph=True, dynamic=True).aot_compile(((x,), {}))
        fn.save_compiled_function(str(path))
        with open(path, "rb") as f:
            loaded = torch.compiler.load_compiled_function(f)
        for batch in (3, 7, 2):  # 1 is outside the symbol's range (0/1 specialisation)
            xb = torch.randn(batch, 16)
            got = loaded(model, xb)
            assert torch.equal(got, fn(model, xb)), batch
            assert torch.allclose(got, model(xb), atol=1e-5), batch


class _Wide(torch.nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.a = torch.nn.Linear(16, hidden)
        self.b = torch.nn.Linear(hidden, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_parameters_of_other_shapes_run_in_pytorch_with_a_warning(tmp_path):
    model, x = _Wide().eval(), torch.randn(3, 16)
    path = tmp_path / "fn.bin"
    with torch.no_grad():
        fn = _aot(model, x, options={"guard_filter_fn": precompile.input_guards})  # parameters unguarded
        fn.save_compiled_function(str(path))
        with open(path, "rb") as f:
            loaded = torch.compiler.load_compiled_function(f)
        other = _Wide(hidden=24).eval()
        with pytest.warns(RuntimeWarning, match=r"f32\[24, 16\], the entry was compiled for f32\[32, 16\]"):
            got = loaded(other, x)
        assert torch.allclose(got, other(x), atol=1e-5)
        assert torch.equal(loaded(model, x), fn(model, x))  # its own parameters: back in the engine
    assert updraft.last_report().partitions[0].cache == "precompiled"


class _Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.b(h) * torch.tensor([1.0, 2.0, 3.0, 4.0]), h.sum(dim=0)  # a tensor constant, two outputs


def _saved_and_loaded(fn, model, x, path):
    """(fn's output, the output of fn saved to `path` and loaded back, eager's, the loaded fn)."""
    want = fn(model, x)
    fn.save_compiled_function(str(path))
    with open(path, "rb") as f:
        loaded = torch.compiler.load_compiled_function(f)
    return want, loaded(model, x), model(x), loaded


def test_partitions_with_pytorch_ops_between_and_tensor_constants(tmp_path):
    model, x = _Mixed().eval(), torch.randn(3, 16)
    config = updraft.CompilerConfig(eager_ops=("aten.relu",), partition_cost=False)
    with torch.no_grad():
        fn = torch.compile(model.forward, backend=updraft.get_backend(config), fullgraph=True).aot_compile(((x,), {}))
        want, got, eager, loaded = _saved_and_loaded(fn, model, x, tmp_path / "fn.bin")
    parts = [p for g in updraft.last_report().graphs for p in g.partitions]
    assert len(parts) >= 2 and all(p.cache == "precompiled" for p in parts), parts
    assert updraft.last_report().fallback_ops["aten.relu.default"] >= 1
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, eager))
    meta, _ = precompile._unpack(PrecompiledGraph.serialize_compile_artifacts(loaded._artifacts.compiled_fn))
    assert any("attrs" in spec for spec in [meta["outer"]] + [p["fallback"] for p in meta["partitions"]]), meta


def test_module_level_aot_compile_round_trip():
    """torch's module-level variant (OptimizedModule._aot_compile, private in torch 2.13) uses
    the same backend protocol; a module loaded with it runs its own weights."""
    from torch._dynamo.aot_compile import ModelInput

    model, x = _MLP().eval(), torch.randn(3, 16)
    with torch.no_grad():
        compiled = torch.compile(model, backend="updraft", fullgraph=True)
        compiled._aot_compile([ModelInput((x,), {}, [])])
        data = compiled._save_aot_compiled_module()
        other = _MLP().eval()
        loaded = torch.compile(other, backend="updraft", fullgraph=True)
        loaded._load_aot_compiled_module(data)
        assert torch.allclose(loaded(x), other(x), atol=1e-5)
    assert updraft.last_report().partitions[0].cache == "precompiled"


def test_transposed_input_round_trip(tmp_path):
    # An input traced as a transposed view enters the engine graph in its memory order
    # (engine_partition.input_orders): the saved partition records the order, and the loaded one
    # passes the input the same way.
    model, x = _MLP().eval(), torch.randn(16, 3).t()
    with torch.no_grad():
        want, got, eager, loaded = _saved_and_loaded(_aot(model, x), model, x, tmp_path / "fn.bin")
    assert updraft.last_report().partitions[0].cache == "precompiled"
    assert torch.equal(got, want) and torch.allclose(got, eager, atol=1e-5)
    meta, blobs = precompile._unpack(PrecompiledGraph.serialize_compile_artifacts(loaded._artifacts.compiled_fn))
    assert [o for p in meta["partitions"] for o in p["orders"] if o] == [[1, 0]], meta["partitions"]
    for bad in ([[0, 0]], "x", [[1, 0], None, None]):  # not a permutation, not a list, the wrong count
        meta["partitions"][0]["orders"] = bad
        with pytest.raises(PrecompileError, match="input orders"):
            loaded = PrecompiledGraph.deserialize_compile_artifacts(precompile._pack(meta, blobs))
            with torch.no_grad():
                loaded(*[model.a.weight, model.a.bias, x, model.b.weight, model.b.bias])
