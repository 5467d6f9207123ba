"""End to end through torch.compile: entry point, configs, fallback, freezing, training, reports."""
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import updraft
from updraft import CompilerConfig, get_backend


def test_entry_point_without_importing_updraft():
    code = (
        "import sys, torch\n"
        "assert 'updraft' not in sys.modules\n"
        "f = torch.compile(lambda x: torch.relu(x) * 2 + 1, backend='updraft')\n"
        "x = torch.randn(4, 5)\n"
        "with torch.no_grad():\n"
        "    y = f(x)\n"
        "torch.testing.assert_close(y, torch.relu(x) * 2 + 1)\n"
        "import updraft\n"
        "rep = updraft.last_report()\n"
        "assert rep.num_partitions == 1 and rep.coverage == 1.0, str(rep)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_get_backend_with_config():
    cfg = CompilerConfig(num_threads=1, fuse=False, fold_constants=False)
    fn = lambda x, w: F.gelu(x @ w).sum(-1)
    x, w = torch.randn(3, 8), torch.randn(8, 4)
    with torch.no_grad():
        got = torch.compile(fn, backend=get_backend(cfg))(x, w)
    torch.testing.assert_close(got, fn(x, w), rtol=1e-4, atol=1e-5)
    assert updraft.last_report().coverage == 1.0


def test_options_through_torch_compile():
    x = torch.randn(3, 4)
    with torch.no_grad():
        got = torch.compile(lambda a: a.exp(), backend="updraft", options={"num_threads": 1})(x)
    torch.testing.assert_close(got, x.exp(), rtol=1e-5, atol=1e-6)


def test_unknown_option_is_a_clear_error():
    f = torch.compile(lambda a: a + 1, backend="updraft", options={"num_thread": 2})
    with pytest.raises(Exception, match="unknown option.*num_thread"):
        f(torch.randn(2))


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"num_threads": -1}, ValueError, "num_threads=-1 must be >= 0"),
    ({"num_threads": "4"}, TypeError, "num_threads must be an int"),
    ({"freeze": 1}, TypeError, "freeze must be a bool"),
    ({"debug": 3}, ValueError, "debug=3 is out of range"),
    ({"min_partition_size": 0}, ValueError, "min_partition_size=0 must be >= 1"),
    ({"eager_ops": "aten.gelu"}, TypeError, "eager_ops must be a sequence"),
])
def test_bad_config_args(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        CompilerConfig(**kwargs)


def test_bad_debug_env(monkeypatch):
    monkeypatch.setenv("UPDRAFT_DEBUG", "verbose")
    with pytest.raises(ValueError, match="UPDRAFT_DEBUG"):
        CompilerConfig()
    monkeypatch.setenv("UPDRAFT_DEBUG", "2")
    assert CompilerConfig().debug == 2


def test_get_backend_rejects_non_config():
    with pytest.raises(TypeError, match="CompilerConfig"):
        get_backend({"num_threads": 2})


def _bessel_model(x):
    return torch.special.bessel_j0(torch.relu(x) + 1.0) * 2.0 - x


def test_fallback_for_op_the_engine_lacks():
    x = torch.randn(5, 6)
    with torch.no_grad():
        got = torch.compile(_bessel_model, backend="updraft")(x)
    torch.testing.assert_close(got, _bessel_model(x), rtol=1e-5, atol=1e-6)
    rep = updraft.explain(_bessel_model, x)
    assert "aten.special_bessel_j0.default" in rep.fallback_ops, str(rep)
    assert "aten.special_bessel_j0.default" in rep.reasons
    assert "aten.relu.default" in rep.engine_ops and rep.num_partitions == 2, str(rep)
    assert "special_bessel_j0" in str(rep)


def test_fallback_for_complex_ops():
    def fn(x):
        spec = torch.fft.rfft(x * 2.0, dim=-1)
        return torch.fft.irfft(spec * 0.5, n=x.shape[-1], dim=-1) + torch.tanh(x)
    x = torch.randn(3, 16)
    with torch.no_grad():
        got = torch.compile(fn, backend="updraft")(x)
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)
    rep = updraft.last_report()
    assert rep.num_fallback_compute > 0 and rep.num_partitions >= 1, str(rep)
    assert any("complex" in r or "no lowering" in r for rs in rep.reasons.values() for r in rs), str(rep)


def test_eager_ops_config():
    fn = lambda x: F.gelu(x) + 1
    x = torch.randn(4, 4)
    rep = updraft.explain(fn, x, config=CompilerConfig(eager_ops=("aten.gelu",)))
    assert rep.fallback_ops["aten.gelu.default"] == 1, str(rep)
    assert rep.reasons["aten.gelu.default"] == ["listed in CompilerConfig.eager_ops"]


def test_min_partition_size():
    fn = lambda x: torch.special.bessel_j0(x.exp()) + 1
    rep = updraft.explain(fn, torch.randn(3), config=CompilerConfig(min_partition_size=2))
    assert rep.num_partitions == 0 and "min_partition_size" in str(rep), str(rep)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_frozen_weights_are_constants_and_follow_updates():
    net = _Net().eval()
    x = torch.randn(3, 8)
    compiled = torch.compile(net, backend="updraft")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-4, atol=1e-5)
        rep = updraft.last_report()
        assert rep.partitions[0].num_constants == 4 and rep.partitions[0].num_inputs == 1, str(rep)
        net.fc1.weight.mul_(-2.0)  # in-place update: the frozen graph must see it
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-4, atol=1e-5)


def test_second_module_instance_uses_its_own_weights():
    # Dynamo shares compiled code between instances of one class; freezing must not leak weights.
    a, b = _Net().eval(), _Net().eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        ca, cb = torch.compile(a, backend="updraft"), torch.compile(b, backend="updraft")
        torch.testing.assert_close(ca(x), a(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(cb(x), b(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ca(x), a(x), rtol=1e-4, atol=1e-5)


def test_freeze_off_passes_weights_as_inputs():
    net = _Net().eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        got = torch.compile(net, backend=get_backend(CompilerConfig(freeze=False)))(x)
    torch.testing.assert_close(got, net(x), rtol=1e-4, atol=1e-5)
    part = updraft.last_report().partitions[0]
    assert part.num_constants == 0 and part.num_inputs == 5


def test_training_graph_is_correct_and_reported():
    net = _Net()
    ref_net = _Net()
    ref_net.load_state_dict(net.state_dict())
    x = torch.randn(3, 8)
    compiled = torch.compile(net, backend="updraft")
    compiled(x).square().sum().backward()
    ref_net(x).square().sum().backward()
    for p, q in zip(net.parameters(), ref_net.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    rep = updraft.last_report()
    kinds = rep.compute_by_kind()
    assert set(kinds) == {"training forward", "training backward"}, str(rep)
    assert all(fb == 0 and eng > 0 for eng, fb in kinds.values()), str(rep)


def test_training_graphs_left_to_pytorch_on_request():
    net = _Net()
    ref_net = _Net()
    ref_net.load_state_dict(net.state_dict())
    x = torch.randn(3, 8)
    compiled = torch.compile(net, backend=get_backend(CompilerConfig(training="pytorch")))
    compiled(x).square().sum().backward()
    ref_net(x).square().sum().backward()
    for p, q in zip(net.parameters(), ref_net.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    rep = updraft.last_report()
    assert all(g.kind.startswith("training") and "training graph" in g.note and g.engine_compute == 0
               for g in rep.graphs), str(rep)
    with pytest.raises(ValueError, match="training='gpu' is not one of"):
        CompilerConfig(training="gpu")


def test_dynamic_shapes_stay_correct():
    fn = lambda x: torch.softmax(x * 2.0, -1) + 1
    compiled = torch.compile(fn, backend="updraft", dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 9):
            x = torch.randn(n, 7)
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)


def test_explain_report_contents():
    net = _Net().eval()
    rep = updraft.explain(net, torch.randn(2, 8))
    assert rep.coverage == 1.0 and rep.num_partitions == 1, str(rep)
    assert rep.engine_ops["aten.addmm.default"] == 2
    assert rep.compile_ms > 0
    text = str(rep)
    assert "compute ops in engine: 3/3 (100.0%)" in text, text
    assert "updraft: 3/3" in rep.summary()


def test_strict_mode_raises_instead_of_falling_back(monkeypatch):
    from updraft import engine_partition

    def broken_build(self, args):
        raise RuntimeError("simulated engine failure")

    monkeypatch.setattr(engine_partition.EnginePartition, "_build", broken_build)
    fn = lambda x: x.exp() + 1
    x = torch.randn(3)
    with torch.no_grad(), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = torch.compile(fn, backend="updraft")(x)
    torch.testing.assert_close(got, fn(x))
    assert any("simulated engine failure" in str(m.message) for m in w)
    assert updraft.last_report().partitions[0].status.startswith("failed")
    torch._dynamo.reset()
    strict = torch.compile(fn, backend=get_backend(CompilerConfig(fallback=False)))
    with torch.no_grad(), pytest.raises(RuntimeError, match="fallback=True"):
        strict(x)


def test_cli_version_and_ops(capsys):
    from updraft import _C
    from updraft.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert updraft.__version__ in capsys.readouterr().out
    assert main(["ops"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == list(_C.op_names()) and "conv2d" in listed


def test_debug_output(capsys):
    with torch.no_grad():
        torch.compile(lambda x: x.sin() * 2, backend=get_backend(CompilerConfig(debug=2)))(torch.randn(3))
    err = capsys.readouterr().err
    assert "[updraft] inference graph: 2 compute ops in the engine" in err
    assert "engine graph" in err


def test_eager_view_of_engine_output_with_other_strides():
    # Eager sdpa returns [B,H,L,E] laid out as [B,L,H,E], and the traced graph .view()s its
    # transpose; the engine's output is contiguous. With dynamic shapes some views stay eager
    # (reshape to several dynamic dims), and they must still work on the engine's layout.
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                 intermediate_size=128)).eval()
    compiled = torch.compile(model, backend="updraft")
    with torch.no_grad():
        for batch, seq in [(2, 16), (2, 24), (3, 20)]:  # the second shape recompiles dynamic
            ids = torch.randint(0, 100, (batch, seq))
            torch.testing.assert_close(compiled(ids).last_hidden_state, model(ids).last_hidden_state,
                                       rtol=1e-4, atol=1e-4)
    assert updraft.last_report().num_partitions >= 1


def test_whole_graph_compile_failure_is_reported_as_fallback(monkeypatch):
    """If partitioning itself fails, the graph runs in PyTorch and the report says so per op."""
    from updraft import backend

    def broken_partition(*args, **kwargs):
        raise RuntimeError("simulated partitioner failure")

    monkeypatch.setattr(backend, "partition_graph", broken_partition)
    fn = lambda x: torch.relu(x @ x.T)
    x = torch.randn(4, 4)
    with torch.no_grad(), warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = torch.compile(fn, backend="updraft")(x)
    torch.testing.assert_close(got, fn(x))
    rep = updraft.last_report()
    assert rep.num_engine_compute == 0 and rep.num_fallback_compute >= 2, str(rep)
    assert any("simulated partitioner failure" in r for rs in rep.reasons.values() for r in rs), str(rep)


def test_tensor_on_a_device_the_engine_does_not_drive_falls_back():
    """A tensor on another device (here `meta`, always available) stays in PyTorch, with the
    device named in the report, and the result is what eager gives."""
    fn = lambda x: torch.relu(x) * 2
    x = torch.empty(4, 8, device="meta")
    with torch.no_grad():
        got = torch.compile(fn, backend="updraft")(x)
    assert got.device.type == "meta" and got.shape == (4, 8)
    rep = updraft.last_report()
    assert rep.num_engine_compute == 0, str(rep)
    assert any("device meta" in r for rs in rep.reasons.values() for r in rs), str(rep)
