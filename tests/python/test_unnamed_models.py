"""Architectures no issue names, inference and training, through the engine against eager.

The rows come from tools/model_sweep.py (which sweeps a longer list: `python
tools/model_sweep.py`); each builds a transformers architecture from its default config shrunk
to two layers of width 64, or a torchvision classifier (`tv:`), with random weights and every
dropout at 0, and compares every floating output and, in training, every parameter's gradient
with eager's (CompilerConfig(inference="engine", training="engine"): the engine's kernels,
whatever the timing would choose).

Tolerance (the tool's docstring gives the reasons): 1e-3 of the largest magnitude of eager's
value, with gradients scaled by at least 1e-4 of the model's largest gradient (a key bias's
gradient is zero up to rounding); a value that eager itself moves by more under rounding (eager
in f64, or eager with inputs and weights changed by 1e-6 relative) gets 10 times that gap, and
the row says `noisy`. A lowering bug gives errors of order 1, which no tolerance here admits:
the test also requires every error below NEVER. Models that ill-conditioned are also compared
in f64 (ROWS64), where no noise allowance is needed.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import model_sweep  # noqa: E402

NEVER = 0.5  # above this relative error no noise estimate excuses a row

# One of each family the op vocabulary meets: shared layers, an encoder-decoder, relative
# positions, alibi, rotary, mixture of experts, a conv-attention hybrid, an audio front end,
# hierarchical vision attention, depthwise convnets, dense concatenation, channel shuffles.
ROWS = ["albert", "bart", "deberta-v2", "bloom", "gpt_neox", "qwen2_moe", "mobilevit", "wav2vec2",
        "segformer", "tv:mobilenet_v3_small", "tv:efficientnet_b0", "tv:densenet121",
        "tv:shufflenet_v2_x1_0"]


# Models whose f32 gradients eager itself moves by 1-25% under a 1e-6 change of its inputs
# (train-mode batch norm over few samples, ReLU masks flipping): in f64 rounding is 1e-16 and
# their gradients are compared at 1e-6 (model_sweep.TOL64), which nothing but a real difference
# reaches. The engine's f64 kernels differ from its f32 ones, its lowering and passes do not.
ROWS64 = ["tv:googlenet", "tv:resnext50_32x4d"]


@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("arch", ROWS)
def test_unnamed_architecture_matches_eager(arch, mode):
    row = model_sweep._one(arch, mode)
    print(row)
    assert row["status"] in ("ok", "noisy"), row
    assert row["err"] < NEVER, row


@pytest.mark.parametrize("arch", ROWS64)
def test_ill_conditioned_training_matches_eager_in_f64(arch):
    row = model_sweep._one(arch, "train64")
    print(row)
    assert row["status"] == "ok", row
