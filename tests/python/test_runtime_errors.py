"""An engine error at run time caused by the input (an index out of range) gives the caller the
error eager PyTorch gives for it, and leaves the partition in the engine for the next call."""
import warnings

import pytest
import torch

import updraft


class EmbedNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, ids):
        return torch.relu(self.lin(self.emb(ids)))


GOOD = torch.tensor([[1, 2, 3]])
BAD = {"past the end": torch.tensor([[1, 10, 3]]), "before the start": torch.tensor([[1, -11, 3]])}


@pytest.mark.parametrize("first", ["good call first", "bad call first"])
@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("fallback", [True, False])
def test_out_of_range_index_raises_eagers_error_and_the_engine_stays(bad, first, fallback):
    torch.manual_seed(0)
    model = EmbedNet().eval()
    compiled = torch.compile(model, backend="updraft", dynamic=False, options={"fallback": fallback})
    with torch.no_grad():
        with pytest.raises(Exception) as eager:
            model(BAD[bad])
        assert type(eager.value) is IndexError  # what a caller of the eager model sees
        if first == "good call first":  # the call after it runs a bound plan (the fast path)
            compiled(GOOD)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(IndexError) as got:
                compiled(BAD[bad])
            assert str(got.value) == str(eager.value)
            out = compiled(GOOD)
        assert not [w for w in caught if "updraft" in str(w.message)], [str(w.message) for w in caught]
        torch.testing.assert_close(out, model(GOOD), rtol=1e-5, atol=1e-6)
    rep = updraft.last_report()
    assert rep.num_partitions == 1 and rep.num_fallback_compute == 0, str(rep)
    assert rep.partitions[0].status == "ok", str(rep)  # the engine, not PyTorch, ran the good call
