"""Operand dtypes are as strict as PyTorch's (issue 14, item 3). The matmul family,
convolution, attention and the norms raise in eager when their operands' dtypes differ, but
their fake-tensor rules do not always check, so Dynamo hands such graphs to the backend. The
engine must not cast and compute where eager raises: the node stays in PyTorch (with the reason
in the report) and the call raises eager's error. Ops that do promote (add, where, ...) and the
mixed-precision rule of the norms (bf16 data, f32 parameters) are unaffected."""
import pytest
import torch
import torch.nn.functional as F

import updraft


def _f32(*s):
    return torch.randn(*s)


def _f64(*s):
    return torch.randn(*s, dtype=torch.float64)


def _i64(*s):
    return torch.randint(0, 3, s)


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


MIXED = {
    "linear_int64_input": (_Linear().eval(), (_i64(2, 4),)),
    "mm_f32_int64": (lambda a, b: a @ b, (_f32(2, 3), _i64(3, 2))),
    "mm_f32_f64": (lambda a, b: a @ b, (_f32(2, 3), _f64(3, 2))),
    "linear_f64_bias": (lambda x, w, b: F.linear(x, w, b), (_f32(2, 4), _f32(3, 4), _f64(3))),
    "layer_norm_f64_weight": (lambda x, w: F.layer_norm(x, (4,), w), (_f32(2, 4), _f64(4))),
    "batch_norm_f64_stats": (lambda x, m, v: F.batch_norm(x, m, v), (_f32(2, 3, 4), _f64(3), _f64(3).abs())),
}


@pytest.mark.parametrize("name", list(MIXED))
def test_mixed_operand_dtypes_raise_as_eager(name):
    fn, args = MIXED[name]
    with torch.no_grad(), pytest.raises(RuntimeError, match="dtype") as eager:
        fn(*args)
    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(type(eager.value), match="dtype"):
        torch.compile(fn, backend="updraft")(*args)
    report = updraft.last_report()
    assert any("mixed dtypes" in r for rs in report.reasons.values() for r in rs), str(report)


def test_linear_with_int64_input_inside_a_larger_graph_raises_as_eager():
    def fn(x, w):
        h = torch.relu(w * 2.0)          # engine
        return F.linear(x, h)            # int64 x with a float weight: eager raises
    args = (_i64(2, 4), _f32(3, 4))
    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(RuntimeError, match="same dtype"):
        torch.compile(fn, backend="updraft")(*args)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_matching_dtypes_still_run_in_the_engine(dt):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).to(dt).eval()
    x = torch.randn(4, 8, dtype=dt)
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend="updraft")(x)
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    report = updraft.last_report()
    assert not any("mixed dtypes" in r for rs in report.reasons.values() for r in rs), str(report)


def test_promoting_ops_still_promote():
    fn = lambda a, b, c: torch.where(a > 0, a, b) + c  # f32 + f64 + int64 promote in eager
    args = (_f32(5), _f64(5), _i64(5))
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="updraft")(*args), fn(*args))
