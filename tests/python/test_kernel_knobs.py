"""Kernel knobs through one door: each of prepack_weights, static_gemm, cpu_isa and
min_work_per_thread set in CompilerConfig picks the same kernels as its UPDRAFT_* environment
variable (read when the config is built), observed by kernel name in updraft.profile; a bad
value, set either way, is an error that names the knob, the value and what is accepted; and a
compile-cache hit builds its kernels under the config in force, not the one it was stored
under (no knob is in the key)."""
import pytest
import torch

import updraft
from updraft import CompilerConfig
from updraft.cache import wait_for_writes

ENV = ("UPDRAFT_PREPACK_WEIGHTS", "UPDRAFT_STATIC_GEMM", "UPDRAFT_CPU_ISA", "UPDRAFT_MIN_WORK_PER_THREAD")


@pytest.fixture(autouse=True)
def _no_knob_env(monkeypatch):
    for var in ENV:
        monkeypatch.delenv(var, raising=False)


def _mlp(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16)).to(dtype).eval()


def _sdpa(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def _kernels(fn, inputs, op, config=None, dynamic=False):
    """Kernel names updraft.profile reports for `op`, with `config` (None: CompilerConfig(),
    built now, so from the environment as it is now)."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=updraft.get_backend(config), dynamic=dynamic)
    with torch.no_grad():
        prof = updraft.profile(compiled, *inputs, runs=1, warmup=1)
    names = sorted({r["kernel"] for r in prof.rows if r["op"] == op})
    assert names, f"no {op} step ran in the engine: {prof}"
    return names


def _same_through_env(monkeypatch, var, text, field, value, fn, inputs, op, dynamic=False):
    by_config = _kernels(fn, inputs, op, CompilerConfig(**{field: value}), dynamic)
    monkeypatch.setenv(var, text)
    by_env = _kernels(fn, inputs, op, None, dynamic)
    monkeypatch.delenv(var)
    assert by_config == by_env, (by_config, by_env)
    return by_config


def test_prepack_weights(monkeypatch):
    x = torch.randn(5, 64)
    assert all(":prepacked" in k for k in _kernels(_mlp(), (x,), "linear")), "default: prepacked"
    got = _same_through_env(monkeypatch, "UPDRAFT_PREPACK_WEIGHTS", "0", "prepack_weights", False, _mlp(), (x,), "linear")
    assert all(":inplace_w" in k for k in got), got


def test_static_gemm(monkeypatch):
    m, x = _mlp(), torch.randn(5, 64)
    assert any(":runtime_m" in k for k in _kernels(m, (x,), "linear", dynamic=True)), "default: runtime M"
    got = _same_through_env(monkeypatch, "UPDRAFT_STATIC_GEMM", "1", "static_gemm", True, m, (x,), "linear", dynamic=True)
    assert not any(":runtime_m" in k for k in got), got


def test_cpu_isa(monkeypatch):
    qkv = [torch.randn(2, 4, 16, 8) for _ in range(3)]
    native = _kernels(_sdpa, qkv, "sdpa")
    assert native == ["cpu_f32_sdpa_tiled_avx512" if "avx512f" in open("/proc/cpuinfo").read() else
                      "cpu_f32_sdpa_tiled_avx2"]
    got = _same_through_env(monkeypatch, "UPDRAFT_CPU_ISA", "avx2", "cpu_isa", "avx2", _sdpa, qkv, "sdpa")
    assert got == ["cpu_f32_sdpa_tiled_avx2"]
    # The f64 gemm micro-kernels follow the same knob.
    f64 = _same_through_env(monkeypatch, "UPDRAFT_CPU_ISA", "avx2", "cpu_isa", "avx2", _mlp(torch.float64),
                            (torch.randn(5, 64, dtype=torch.float64),), "linear")
    assert all(k.endswith(":avx2") or ":avx2:" in k for k in f64), f64


def test_min_work_per_thread(monkeypatch):
    # A small linear runs on one thread (its kernel says ":1thread"); with a tiny threshold it
    # takes both of num_threads=2.
    m, x = _mlp(), torch.randn(5, 64)
    assert all(k.endswith(":1thread") for k in _kernels(m, (x,), "linear", CompilerConfig(num_threads=2)))
    by_config = _kernels(m, (x,), "linear", CompilerConfig(num_threads=2, min_work_per_thread=1.0))
    monkeypatch.setenv("UPDRAFT_MIN_WORK_PER_THREAD", "1")
    by_env = _kernels(m, (x,), "linear", CompilerConfig(num_threads=2))
    assert by_config == by_env and not any(k.endswith(":1thread") for k in by_config), (by_config, by_env)


@pytest.mark.parametrize("field, value, words", [
    ("cpu_isa", "avx3", ["cpu_isa", "'avx3'", "native", "avx2"]),
    ("min_work_per_thread", 0, ["min_work_per_thread", "0", "> 0"]),
    ("min_work_per_thread", float("nan"), ["min_work_per_thread", "nan", "> 0"]),
])
def test_bad_value_names_knob_value_and_accepted(field, value, words):
    with pytest.raises(ValueError) as e:
        CompilerConfig(**{field: value})
    assert all(w in str(e.value) for w in words), str(e.value)


@pytest.mark.parametrize("field, value", [("prepack_weights", 0), ("static_gemm", "1"), ("min_work_per_thread", "1e6")])
def test_wrong_type_is_refused(field, value):
    with pytest.raises(TypeError, match=field):
        CompilerConfig(**{field: value})


@pytest.mark.parametrize("var, text, words", [
    ("UPDRAFT_CPU_ISA", "avx3", ["UPDRAFT_CPU_ISA", "'avx3'", "native", "avx2"]),
    ("UPDRAFT_PREPACK_WEIGHTS", "yes", ["UPDRAFT_PREPACK_WEIGHTS", "'yes'", "0 or 1"]),
    ("UPDRAFT_STATIC_GEMM", "on", ["UPDRAFT_STATIC_GEMM", "'on'", "0 or 1"]),
    ("UPDRAFT_MIN_WORK_PER_THREAD", "lots", ["UPDRAFT_MIN_WORK_PER_THREAD", "'lots'", "> 0"]),
    ("UPDRAFT_MIN_WORK_PER_THREAD", "-5", ["UPDRAFT_MIN_WORK_PER_THREAD", "-5", "> 0"]),
])
def test_bad_environment_value(monkeypatch, var, text, words):
    monkeypatch.setenv(var, text)
    with pytest.raises(ValueError) as e:
        CompilerConfig()
    assert all(w in str(e.value) for w in words), str(e.value)


def test_engine_refuses_unknown_isa():
    from updraft import _C

    g = _C.Graph()
    with pytest.raises(_C.UpdraftError, match=r"\[options\] cpu_isa='avx3'.*native, avx2"):
        _C.compile(g, {"cpu_isa": "avx3"})


def test_cache_hit_builds_kernels_under_the_current_config(tmp_path):
    """The cache stores the optimised graph, which no kernel knob changes; a hit builds its
    plan under the config in force, so the kernels follow it, not the storing compile's."""
    m, x = _mlp(), torch.randn(5, 64)
    stored = _kernels(m, (x,), "linear", CompilerConfig(cache_dir=str(tmp_path)))
    wait_for_writes()
    hit = _kernels(m, (x,), "linear", CompilerConfig(cache_dir=str(tmp_path), prepack_weights=False))
    assert [p.cache for p in updraft.last_report().partitions] == ["hit"]
    assert all(":prepacked" in k for k in stored) and all(":inplace_w" in k for k in hit), (stored, hit)


def test_engine_accepts_every_option_the_config_sends_and_names_them_on_a_typo(tmp_path):
    """Every key CompilerConfig.engine_options() can produce is one the engine's options table
    takes, and an unknown key's error lists them all (the table is the one list)."""
    from updraft import _C as C
    cfg = CompilerConfig(min_work_per_thread=1e6, dump_dir=str(tmp_path), watchdog_s=30.0,
                         disable_passes=("cse",), debug_fault="kernel:relu")
    sent = cfg.engine_options()
    with pytest.raises(C.UpdraftError) as e:
        C.compile(C.Graph(), {"not_an_option": 1})
    known = str(e.value).split("(known: ", 1)[1].rstrip(")").split(", ")
    assert set(sent) <= set(known), set(sent) - set(known)
    g = C.Graph()
    x = g.add_input("x", "f32", [2, 3])
    g.set_outputs(g.add_node("neg", [x]))
    assert C.compile(g, sent).output_dtypes() == ["f32"]
