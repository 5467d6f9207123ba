"""Real models (transformers configs, random weights, fp32, eval, no_grad) vs eager.

Tolerance: atol=rtol=1e-3 on the last hidden state. Twelve layers of oneDNN GEMMs/convs whose
summation order differs from ATen's (notes §4: about 1e-5 relative per GEMM) plus layer norms
that rescale differences grow the error to around 1e-4 on values of order 1; 1e-3 leaves a
margin while still catching any real lowering bug (those give errors of order 1).
Each test also requires that 100% of compute ops ran in the engine.
"""
import pytest
import torch

import updraft
from updraft import zoo


def _hidden(out):
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2", "resnet50", "vit"])
def test_model_matches_eager_fully_in_engine(name):
    model, inputs = zoo.build(name)
    with torch.no_grad():
        want = _hidden(model(*inputs))
        compiled = torch.compile(model, backend="updraft")
        got = _hidden(compiled(*inputs))
        again = _hidden(compiled(*inputs))
    rep = updraft.last_report()
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(again, want, rtol=1e-3, atol=1e-3)
    assert rep.coverage == 1.0, str(rep)
    assert rep.num_partitions == 1 and all(p.status == "ok" for p in rep.partitions), str(rep)
