"""updraft.export and updraft.load (issue 16): a model file gives the same bits as
torch.compile(backend="updraft") at the same thread count, is close to eager (atol=rtol=1e-3 on
f32, as the model tests), refuses what the engine cannot run with the list of ops, and the
loader refuses bad files and bad inputs with errors that say why.

Models are small configs of the zoo's architectures (BERT, GPT-2, ResNet) so the suite stays
quick; test_models.py runs the full-size ones through torch.compile.
"""
import os
import sys

import numpy as np
import pytest
import torch
from torch.export import Dim

import updraft
from updraft import CompilerConfig, _C
from updraft.export import ExportError

THREADS = 2
CONFIG = CompilerConfig(num_threads=THREADS)
TOL = dict(rtol=1e-3, atol=1e-3)


def _tiny_bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     vocab_size=500, max_position_embeddings=128)
    return BertModel(cfg).eval()


def _tiny_gpt2():
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=128)).eval()
    model.config.use_cache = False  # a key/value cache is state between calls; a model file has none
    return model


def _tiny_resnet():
    from transformers import ResNetConfig, ResNetModel

    cfg = ResNetConfig(depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256], embedding_size=16)
    return ResNetModel(cfg).eval()


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).eval()


def _leaves(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):  # a transformers ModelOutput: its tensors, in field order
        out = out.to_tuple()
    return [t for t in out if isinstance(t, torch.Tensor)]


def _compiled(model, dynamic=None):
    return torch.compile(model, backend=updraft.get_backend(CONFIG), dynamic=dynamic)


def _check_same_as_compile_and_close_to_eager(model, loaded, compiled, x):
    got = loaded(x)
    got = list(got) if isinstance(got, tuple) else [got]
    with torch.no_grad():
        want = _leaves(compiled(x))
        eager = _leaves(model(x))
    assert len(got) == len(want) == len(eager)
    for g, w, e in zip(got, want, eager):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(g, w), f"differs from torch.compile by {(g - w).abs().max().item()}"
        torch.testing.assert_close(g, e, **TOL)


@pytest.mark.parametrize("build, example", [
    (_mlp, lambda: torch.randn(3, 64)),
    (_tiny_bert, lambda: torch.randint(0, 500, (2, 16))),
    (_tiny_gpt2, lambda: torch.randint(0, 500, (2, 16))),
    (_tiny_resnet, lambda: torch.randn(2, 3, 64, 64)),
], ids=["mlp", "bert", "gpt2", "resnet"])
def test_export_load_bit_identical_to_torch_compile(build, example, tmp_path):
    torch.manual_seed(0)
    model, x = build(), example()
    path = tmp_path / "m.updraft"
    info = updraft.export(model, (x,), path, config=CONFIG)
    assert info.file_bytes == os.path.getsize(path)
    # Every weight is in the file by value: it holds at least the parameters' bytes (a folded
    # batch norm or a prepacked copy is stored instead of the original, not beside it).
    assert info.file_bytes >= 0.9 * info.parameter_bytes
    loaded = updraft.load(path, num_threads=THREADS)
    assert [i["name"] for i in loaded.signature["inputs"]] == [n for n, _, _ in info.inputs]
    _check_same_as_compile_and_close_to_eager(model, loaded, _compiled(model), x)


def test_output_names_come_from_the_model_output(tmp_path):
    model = _tiny_bert()
    updraft.export(model, (torch.randint(0, 500, (1, 8)),), tmp_path / "b.updraft")
    loaded = updraft.load(tmp_path / "b.updraft")
    assert loaded.output_names == ["last_hidden_state", "pooler_output"]
    updraft.export(_mlp(), (torch.randn(1, 64),), tmp_path / "m.updraft")
    assert updraft.load(tmp_path / "m.updraft").output_names == ["out0"]

    class Keys(torch.nn.Module):  # dict keys that are no file names become plain ones
        def forward(self, x):
            return {"a/b": x + 1, ".hidden": x * 2}

    updraft.export(Keys(), (torch.randn(2, 3),), tmp_path / "k.updraft")
    assert updraft.load(tmp_path / "k.updraft").output_names == ["a_b", "_.hidden"]


@pytest.fixture(scope="module")
def dynamic_bert(tmp_path_factory):
    torch.manual_seed(0)
    model = _tiny_bert()
    path = tmp_path_factory.mktemp("dyn") / "bert_dyn.updraft"
    dyn = {"input_ids": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=1, max=128)}}
    info = updraft.export(model, (torch.randint(0, 500, (2, 16)),), path, dynamic_shapes=dyn, config=CONFIG)
    return model, path, info


def test_dynamic_bert_over_sequence_lengths(dynamic_bert):
    model, path, info = dynamic_bert
    assert sorted(info.ranges.values()) == [(1, 8), (1, 128)]
    loaded = updraft.load(path, num_threads=THREADS)
    # Marked dynamic, not torch.compile(dynamic=True): that also lifts Python floats (GPT-2's
    # sqrt(2/pi)) into graph inputs, a different engine graph. Dynamo fixes a dim that is 1 at
    # its first compile, so batch 1 gets a static graph there: compared at batch 2 and 3.
    compiled = _compiled(model)
    for batch, seq in [(2, 5), (2, 16), (3, 37), (2, 128)]:
        x = torch.randint(0, 500, (batch, seq))
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(x, 1)
        _check_same_as_compile_and_close_to_eager(model, loaded, compiled, x)
    with torch.no_grad():  # the ends of the ranges run too
        for x in (torch.randint(0, 500, (1, 1)), torch.randint(0, 500, (8, 3))):
            for g, e in zip(loaded(x), _leaves(model(x))):
                torch.testing.assert_close(g, e, **TOL)


def test_input_outside_the_exported_range_is_refused(dynamic_bert):
    _, path, _ = dynamic_bert
    loaded = updraft.load(path)
    with pytest.raises(ValueError, match=r"\[updraft.load\].*\[model\] input input_ids dim 1 is 129, outside the "
                                         r"range \[1, 128\]"):
        loaded(torch.randint(0, 500, (2, 129)))
    with pytest.raises(ValueError, match=r"input input_ids has rank 1"):
        loaded(torch.randint(0, 500, (16,)))
    with pytest.raises(TypeError, match=r"input 0 'input_ids' has dtype torch.int32, the model takes torch.int64"):
        loaded(torch.randint(0, 500, (2, 16), dtype=torch.int32))
    with pytest.raises(TypeError, match=r"takes 1 input\(s\) \(input_ids\), got 2"):
        loaded(torch.randint(0, 500, (2, 16)), torch.randint(0, 500, (2, 16)))
    # A shape signature that ran is still checked for dtype on the fast path.
    ok = torch.randint(0, 500, (2, 16))
    loaded(ok)
    with pytest.raises(TypeError, match="dtype torch.int32"):
        loaded(ok.int())


def test_unsupported_ops_fail_the_export_with_the_list(tmp_path):
    class Special(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = torch.special.bessel_j0(self.lin(x))
            return torch.special.bessel_j0(y) + torch.special.i1(y)

    path = tmp_path / "bad.updraft"
    with pytest.raises(ExportError) as e:
        updraft.export(Special(), (torch.randn(2, 4),), path)
    msg = str(e.value)
    assert "[updraft.export] 3 node(s) of 2 op(s) cannot run in the engine" in msg
    assert "aten.special_bessel_j0.default x2 (special_bessel_j0, special_bessel_j0_1): no lowering" in msg
    assert "aten.special_i1.default x1" in msg
    assert not path.exists()


def test_size_conditions_the_file_cannot_check_refuse_the_export(tmp_path):
    # Halving the batch holds for even batches only; torch.export keeps that beside the graph
    # (its own module checks it per call), the file checks ranges only: an odd batch ran and
    # returned a wrong shape before the export refused this.
    class Halves(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0] // 2, 2, -1).sum(1)

    with pytest.raises(ExportError, match=r"holds only for sizes where .*Mod\(3\*s\d+, 2\*\(\(s\d+//2\)\)\), 0\).*"
                                          r"s\d+ in \[2, inf\].*export those dims static"):
        updraft.export(Halves(), (torch.randn(4, 3),), tmp_path / "h.updraft", dynamic_shapes=({0: Dim.AUTO},))
    updraft.export(Halves(), (torch.randn(4, 3),), tmp_path / "h.updraft")  # static: fine
    torch.testing.assert_close(updraft.load(tmp_path / "h.updraft")(torch.ones(4, 3)), torch.full((2, 3), 2.0))


def test_a_derived_input_dim_is_refused(tmp_path):
    # 2*h as an input dim: the engine would bind a symbol of its own to it, with no range in the
    # file, and take odd sizes that torch.export's module refuses.
    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    with pytest.raises(ExportError, match=r"input dims 2\*s\d+ \(engine symbol e_0\) are expressions"):
        updraft.export(Double(), (torch.randn(4, 3),), tmp_path / "d.updraft",
                       dynamic_shapes=({0: 2 * Dim("h", min=1, max=32)},))


def test_eager_ops_of_the_config_are_refused_too(tmp_path):
    # The partitioner's own check decides: what CompilerConfig leaves to PyTorch cannot go in a file.
    with pytest.raises(ExportError, match=r"aten.relu.default x1 \(relu\): listed in CompilerConfig.eager_ops"):
        updraft.export(_mlp(), (torch.randn(2, 64),), tmp_path / "m.updraft",
                       config=CompilerConfig(eager_ops=("aten.relu",)))


def test_a_forward_that_writes_a_buffer_is_refused(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).train()
    with pytest.raises(ExportError, match=r"writes state \(buffer_mutation 1.running_mean.*call model.eval\(\)"):
        updraft.export(model, (torch.randn(3, 4),), tmp_path / "m.updraft")


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "mlp.updraft"
    model = _mlp()
    updraft.export(model, (torch.randn(2, 64),), path, dynamic_shapes=({0: Dim("batch", min=1, max=1024)},))
    return model, path


def test_corrupt_and_truncated_files_are_refused(mlp_file, tmp_path):
    _, path = mlp_file
    data = bytearray(path.read_bytes())
    bad = tmp_path / "corrupt.updraft"
    data[len(data) // 2] ^= 0x40  # a bit in the weights
    bad.write_bytes(bytes(data))
    with pytest.raises(_C.UpdraftError, match=r"\[updraft.load\] .*corrupt.updraft: \[model\] .*checksum"):
        updraft.load(bad)
    short = tmp_path / "short.updraft"
    short.write_bytes(path.read_bytes()[: len(data) // 3])
    with pytest.raises(_C.UpdraftError, match=r"\[updraft.load\] .*short.updraft: \[model\]"):
        updraft.load(short)
    with pytest.raises(_C.UpdraftError, match=r"\[updraft.load\] .*cannot open"):
        updraft.load(tmp_path / "missing.updraft")


def test_numpy_in_numpy_out(mlp_file):
    model, path = mlp_file
    loaded = updraft.load(path)
    x = np.random.default_rng(0).standard_normal((5, 64), dtype=np.float32)
    got = loaded(x)
    assert isinstance(got, np.ndarray) and got.shape == (5, 32) and got.dtype == np.float32
    with torch.no_grad():
        want = model(torch.from_numpy(x))
    assert np.array_equal(got, loaded(torch.from_numpy(x)).numpy())
    torch.testing.assert_close(torch.from_numpy(got), want, **TOL)
    # Not contiguous: made contiguous for the engine, same answer.
    xt = np.asfortranarray(x)
    assert np.array_equal(loaded(xt), got)
    with pytest.raises(TypeError, match=r"dtype torch.float64, the model takes torch.float32"):
        loaded(x.astype(np.float64))


def test_strided_and_grad_inputs_take_the_general_path(mlp_file):
    model, path = mlp_file
    loaded = updraft.load(path)
    x = torch.randn(64, 7).t()  # [7, 64], not contiguous: passed with its strides, packed by the plan
    want = loaded(x.contiguous())
    assert torch.equal(loaded(x), want)
    assert torch.equal(loaded(x.contiguous().requires_grad_()), want)
    row = torch.randn(1, 64).expand(7, 64)  # stride 0
    assert torch.equal(loaded(row), loaded(row.contiguous()))


def test_the_call_path_runs_no_dynamo_or_aot(mlp_file):
    _, path = mlp_file
    loaded = updraft.load(path)
    x = torch.randn(4, 64)
    loaded(x)  # the first call of a shape checks and binds it
    files = set()

    def profile(frame, event, arg):
        if event == "call":
            files.add(frame.f_code.co_filename)

    for _ in range(2):
        sys.setprofile(profile)
        try:
            loaded(torch.randn(3 + _, 64))  # a new shape (check + bind), then a seen one
            loaded(x)
        finally:
            sys.setprofile(None)
    torch_files = {f for f in files if f"torch{os.sep}" in f}
    banned = ("_dynamo", "_functorch", "_guards", os.sep + "fx" + os.sep)
    assert not {f for f in torch_files if any(b in f for b in banned)}, torch_files


def test_calls_from_several_threads_at_once(mlp_file):
    import threading

    _, path = mlp_file
    loaded = updraft.load(path, num_threads=1)
    xs = [torch.randn(b, 64) for b in (1, 2, 3, 5, 8, 13)]
    want = [loaded(x) for x in xs]
    fresh = updraft.load(path, num_threads=1)  # shapes bound concurrently, not before
    errors, barrier = [], threading.Barrier(4)

    def worker(k):
        try:
            barrier.wait()
            for i in range(60):
                j = (i + k) % len(xs)
                got = fresh(xs[j])
                if not torch.equal(got, want[j]):
                    errors.append(f"thread {k} call {i}: batch {xs[j].shape[0]} differs")
        except Exception as e:  # reported below, with the thread
            errors.append(f"thread {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def test_the_file_is_replaced_atomically(mlp_file, tmp_path):
    # A loaded model keeps running from its mapping while the file is exported again over it.
    model, path = mlp_file
    target = tmp_path / "m.updraft"
    target.write_bytes(path.read_bytes())
    loaded = updraft.load(target)
    x = torch.randn(2, 64)
    before = loaded(x)
    updraft.export(_tiny_mlp_other_weights(), (torch.randn(2, 64),), target)
    assert torch.equal(loaded(x), before)
    assert not torch.equal(updraft.load(target)(x), before)
    assert [p.name for p in tmp_path.iterdir()] == ["m.updraft"]  # no temporary file left


def _tiny_mlp_other_weights():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).eval()


def test_signature_and_info(mlp_file):
    _, path = mlp_file
    loaded = updraft.load(path, map=False)
    sig = loaded.signature
    assert sig["inputs"] == [{"name": "input", "dtype": "f32", "shape": [sig["inputs"][0]["shape"][0], 64],
                              "binds": ""}]
    sym = sig["inputs"][0]["shape"][0]
    assert sig["ranges"] == {sym: (1, 1024)}
    assert sig["outputs"][0]["shape"] == [sym, 32]
    info = loaded.info
    assert info["file_bytes"] == os.path.getsize(path) and info["mapped"] is False
    assert "torch.nn.modules.container.Sequential" in info["note"] and torch.__version__ in info["note"]
    assert f"updraft {updraft.__version__}" in info["note"]
    assert loaded(torch.randn(1, 64)).shape == (1, 32)


def test_cli_export_writes_a_loadable_file(tmp_path, capsys):
    from updraft import cli, zoo

    out = tmp_path / "mlp.updraft"
    assert cli.main(["export", "mlp", "-o", str(out), "--batch", "2", "--dynamic"]) == 0
    printed = capsys.readouterr().out
    assert "outputs vs eager: max abs difference" in printed
    loaded = updraft.load(out)
    model, (x,) = zoo.build("mlp", batch=5)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), **TOL)
    assert list(loaded.signature["ranges"].values()) == [(1, (1 << 63) - 1)]


def test_cli_export_refuses_unknown_model_and_bad_seq(tmp_path, capsys):
    from updraft import cli

    assert cli.main(["export", "nosuchmodel", "-o", str(tmp_path / "x")]) == 2
    assert cli.main(["export", "mlp", "--seq", "8", "-o", str(tmp_path / "x")]) == 2
    assert "takes no sequence length" in capsys.readouterr().err


# The full-size zoo models (BERT-base, ResNet-50, GPT-2): test_one_behaviour.py, which checks the
# C++ runtime too.
