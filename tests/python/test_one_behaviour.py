"""One model file, one behaviour (issue 16): the same file gives bit-identical outputs through
the C++ runtime (the `updraft-run` CLI, built on the public API include/updraft/runtime.h),
`updraft.load`, and `torch.compile(backend="updraft")` of the same model, at the same thread
count; all of them within the whole-model tolerance of eager (atol = rtol = 1e-3 on f32, as
test_models.py: reassociated sums over hidden sizes up to 3072).

Each path shares the engine's kernels, so any difference in bits means one of them built a
different graph or plan (a missed pass, another thread count, another decomposition): that is
what the equality checks. Small configs of the zoo's architectures run in the default lane; the
full-size BERT-base, ResNet-50 and GPT-2 in the slow lane.
"""
import subprocess

import numpy as np
import pytest
import torch
from torch.export import Dim

import updraft
from updraft import CompilerConfig

from test_export import _leaves, _tiny_bert, _tiny_gpt2, _tiny_resnet
from test_updraft_run import BIN, require_binary  # noqa: F401 (autouse: fails without updraft-run)

THREADS = 2
CONFIG = CompilerConfig(num_threads=THREADS)
TOL = dict(rtol=1e-3, atol=1e-3)

def _cli_outputs(path, inputs, names, tmp_path):
    """The file run by `updraft-run run` (C++, no Python) on these inputs, read back from .npy."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    args = [BIN, "run", str(path), "--threads", str(THREADS), "--output-dir", str(tmp_path / "out")]
    for k, x in enumerate(inputs):
        p = tmp_path / f"in{k}.npy"
        np.save(p, x.numpy())
        args += ["--input", str(p)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [torch.from_numpy(np.load(tmp_path / "out" / f"{n}.npy")) for n in names]


def _check_all_paths(model, path, x, compiled, tmp_path):
    loaded = updraft.load(path, num_threads=THREADS)
    got = loaded(x)
    got = list(got) if isinstance(got, tuple) else [got]
    cli = _cli_outputs(path, [x], loaded.output_names, tmp_path)
    with torch.no_grad():
        via_compile = _leaves(compiled(x))
        eager = _leaves(model(x))
    assert len(got) == len(cli) == len(via_compile) == len(eager)
    for name, g, c, w, e in zip(loaded.output_names, got, cli, via_compile, eager):
        assert torch.equal(c, g), f"{name}: updraft-run differs from updraft.load by {(c - g).abs().max().item()}"
        assert torch.equal(g, w), f"{name}: updraft.load differs from torch.compile by {(g - w).abs().max().item()}"
        torch.testing.assert_close(g, e, **TOL)


@pytest.mark.parametrize("build, example", [
    (_tiny_bert, lambda: torch.randint(0, 500, (2, 16))),
    (_tiny_gpt2, lambda: torch.randint(0, 500, (2, 16))),
    (_tiny_resnet, lambda: torch.randn(2, 3, 64, 64)),
], ids=["bert", "gpt2", "resnet"])
def test_one_file_same_bits_everywhere(build, example, tmp_path):
    torch.manual_seed(0)
    model, x = build(), example()
    path = tmp_path / "m.updraft"
    updraft.export(model, (x,), path, config=CONFIG)
    _check_all_paths(model, path, x, torch.compile(model, backend=updraft.get_backend(CONFIG)), tmp_path)


def test_dynamic_bert_same_bits_everywhere_over_lengths(tmp_path):
    torch.manual_seed(0)
    model = _tiny_bert()
    path = tmp_path / "bert_dyn.updraft"
    dyn = {"input_ids": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=1, max=128)}}
    updraft.export(model, (torch.randint(0, 500, (2, 16)),), path, dynamic_shapes=dyn, config=CONFIG)
    compiled = torch.compile(model, backend=updraft.get_backend(CONFIG))
    for batch, seq in [(2, 7), (3, 33), (2, 128)]:
        x = torch.randint(0, 500, (batch, seq))
        # Marked dynamic so that torch.compile builds one symbolic graph, as the file holds
        # (batch 1 would get Dynamo's static graph: test_export.py says why).
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(x, 1)
        _check_all_paths(model, path, x, compiled, tmp_path / f"{batch}x{seq}")


@pytest.mark.slow
@pytest.mark.parametrize("name, kwargs", [("bert", {"seq": 128}), ("resnet50", {}), ("gpt2", {"seq": 64})])
def test_full_size_zoo_model_same_bits_everywhere(name, kwargs, tmp_path):
    from updraft import zoo

    model, inputs = zoo.build(name, batch=1, **kwargs)
    (x,) = inputs
    if getattr(getattr(model, "config", None), "use_cache", False):
        model.config.use_cache = False  # a key/value cache is state between calls; a model file has none
    path = tmp_path / f"{name}.updraft"
    updraft.export(model, (x,), path, config=CONFIG)
    _check_all_paths(model, path, x, torch.compile(model, backend=updraft.get_backend(CONFIG)), tmp_path)
