"""LLM generation benchmark: eager, Inductor, updraft and llama.cpp on a Llama-architecture model.

    python benchmarks/llm.py --install-peers                 # once: llama-cpp-python + its GGUF converter
    python benchmarks/llm.py --boost                         # 156M model, 2 and 1 threads, every backend
    python benchmarks/llm.py --models 1b --threads 2 --boost
    python benchmarks/llm.py --backends eager updraft --threads 1 --runs 1 --doc -   # a slice
    python benchmarks/llm.py --wait-policy --boost           # OpenMP wait policy: spin counts x load

Models (random weights, `torch.manual_seed(0)`, saved with `save_pretrained` under build/llm/):
"156m" is the issue's model (hidden 1024, intermediate 2816, 8 layers, 16 query / 4 key-value
heads, vocab 32000); "1b" has TinyLlama-1.1B's shape (hidden 2048, intermediate 5632, 22 layers,
32 / 4 heads, vocab 32000; 1.1 B parameters). There is no tokenizer to download: prompts are
random token ids (seeded), and the vocabulary that the GGUF file needs is written from code
(`write_vocab`: a byte-fallback BPE tokenizer.json whose 32000 entries are the three specials,
the 256 byte tokens and placeholder pieces), which the converter reads as a Llama HF vocab.
GGUF files (f32, f16, q8_0) come from `convert_hf_to_gguf.py` of the llama-cpp-python sdist, and
q4_0 from llama.cpp's quantizer run on the f32 file.

Backends: eager `generate`; Inductor (`model.forward = torch.compile(model.forward)` with the
static cache, as transformers documents it); updraft with the dynamic cache (`updraft`) and the
static cache (`updraft_static`, plus `updraft_static_<dtype>` for every `weight_dtype` that
`updraft.CompilerConfig` accepts, when that field exists); updraft on the model quantised in place
by `updraft.quantize_weights` (`updraft_quantized_int8`, `_int4`, `_bf16`: the f32 weights released,
dynamic cache; `updraft_quantized_int8_act` and `_int4_act` add `activation_dtype="int8"`, int8 x
int8 products as llama.cpp's q8_0 and q4_0 compute them); llama.cpp through llama-cpp-python
in its own venv (build/peers/llama) at f32, f16, q8_0 and q4_0. Greedy decoding, end-of-sequence
disabled so that every run produces `--new-tokens` tokens.

Timing: prompt processing = from the `generate` call to the first logits (a LogitsProcessor
stamps each step; llama.cpp: the `eval` of the prompt), as prompt tokens/s; decode = the time
between the first and the last step over the steps between (ms/token; llama.cpp: `eval` of one
token + argmax). Each process runs one warm-up generation (its wall time is "first call": the
compiles), 8 short ones (2 new tokens: past updraft's timing of each graph against eager over
its first calls, WARM_PREFILLS) and one timed generation per prompt length. `--runs` fresh processes per row,
interleaved round-robin over the backends; the table gives the median and the min-max. Peak RSS
is the process's VmHWM (ru_maxrss: imports + model + compile + runs); the serving peak starts
over once the model is loaded (and quantised), so it leaves out the f32 weights that a quantised
row held only while loading (llama.cpp rows: the same as the peak). The torch rows import
updraft only when they run it, so eager and Inductor run with libgomp's own wait policy, as a
user's process would (`--spin` forces one setting on every row). "= eager" counts the generated
tokens equal to eager's greedy tokens (llama.cpp: its own f32/f16/q8_0/q4_0 arithmetic; random
weights give near-tied logits, so f16 and q8_0 drift is expected).

The workers import the updraft package this process imports (the installed one, or a built
tree's python/ on PYTHONPATH); if a file of it changes while a row runs (a rebuild, an edit), that
row is discarded and the run stops, since later rows would measure another build.

`--wait-policy` measures the OpenMP wait policy instead: decode ms/token of updraft on the
model and the zoo MLP (batch 1 and 64), for each GOMP_SPINCOUNT in `--spins` (passive =
OMP_WAIT_POLICY=passive), with 0 and 1 busy-looping neighbour processes (`--loads`).
"""
from __future__ import annotations

import os

USER_ENV = dict(os.environ)  # before anything imports updraft (which sets GOMP_SPINCOUNT)

# Short generations after the first, on every torch row: updraft times each graph against eager
# over its first 8 calls (CompilerConfig(inference="auto"): one untimed call each, then 3 each,
# alternating), and a prefill graph gets one call per generation, so without these the timed
# generation's prefill was one of eager's trial calls, its first (cold) one at that: 237 against
# 660 prompt tokens/s in session 21's benchmark. The timed run is then the state a server is in
# after its first requests.
WARM_PREFILLS = 8

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402  (process isolation, priority boost, machine line, doc block)

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "llm"
PEER = ROOT / "build" / "peers" / "llama"            # llama-cpp-python's venv
CONVERTER = ROOT / "build" / "peers" / "llama-convert"  # convert_hf_to_gguf.py + conversion/ + gguf-py/
PEER_PY = PEER / "bin" / "python"
# The folder the workers import updraft from: the one holding the package this process imports
# (package_dir; python/ first would shadow an installed package in a fresh set-up).
PACKAGE = ROOT / "python"

MODELS = {
    "156m": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                 num_key_value_heads=4, vocab_size=32000),
    "1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
               num_key_value_heads=4, vocab_size=32000),
}
GGUF_TYPES = ("f32", "f16", "q8_0")  # written by convert_hf_to_gguf.py
# Written by llama.cpp's own quantizer (llama_model_quantize, as the llama-quantize tool) from the
# f32 file: the converter has no 4-bit outtype. q4_0 is llama.cpp's int4 (groups of 32, one f16
# scale each) beside updraft's int4 rows; its defaults keep the output projection at q6_K.
QUANTIZED_GGUF = {"q4_0": 2}  # type -> llama_ftype (LLAMA_FTYPE_MOSTLY_Q4_0)
TORCH_BACKENDS = ["eager", "inductor", "updraft", "updraft_static"]
# A row name ending in this runs that row with int8 activations (CompilerConfig.activation_dtype),
# for rows over int8 or int4 weights: updraft_static_int8_act, updraft_static_int4_act,
# updraft_quantized_int8_act.
ACT_SUFFIX = "_act"
LLAMA_BACKENDS = [f"llamacpp_{t}" for t in (*GGUF_TYPES, *QUANTIZED_GGUF)]
N_SPECIAL = 3     # <unk> <s> </s>
FIRST_ID = 3 + 256  # prompts avoid the specials and the byte tokens
SPINS = ["passive", "1000", "10000", "100000", "300000"]


def log(msg: str) -> None:
    print(f"[llm] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Peer installation (on demand; never part of the project's setup or CI)

def _run_logged(cmd: list[str], **kw) -> None:
    env = kw.pop("env", None)
    shown = " ".join(shlex.quote(c) for c in cmd)
    if env:
        extra = {k: v for k, v in env.items() if os.environ.get(k) != v}
        shown = " ".join(f"{k}={v}" for k, v in extra.items()) + " " + shown
    log(f"$ {shown}")
    subprocess.run(cmd, check=True, env=env, **kw)


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def install_peers(jobs: int) -> None:
    """Creates build/peers/llama (a venv with llama-cpp-python, compiled from source by pip for
    this CPU) and build/peers/llama-convert (the GGUF converter from the same sdist), printing
    every command. Each step is skipped when its result is already there."""
    if not PEER_PY.exists():
        _run_logged([sys.executable, "-m", "venv", str(PEER)])
    pip = [str(PEER_PY), "-m", "pip"]
    have = subprocess.run([str(PEER_PY), "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                          capture_output=True, text=True)
    if have.returncode != 0:
        # pip builds llama.cpp with CMake for the native ISA (GGML_NATIVE, its default); one
        # compile job at low priority keeps a shared machine usable (~30 min on 2 cores).
        env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(jobs))
        _run_logged(["nice", "-n", "19", *pip, "install", "llama-cpp-python"], env=env)
        have = subprocess.run([str(PEER_PY), "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                              capture_output=True, text=True, check=True)
    version = have.stdout.strip()
    log(f"llama-cpp-python {version} in {PEER.relative_to(ROOT)}")
    if not (CONVERTER / "convert_hf_to_gguf.py").exists():
        sdist_dir = ROOT / "build" / "peers" / "sdist"
        sdist_dir.mkdir(parents=True, exist_ok=True)
        sdist = sdist_dir / f"llama_cpp_python-{version}.tar.gz"
        if not sdist.exists():
            _run_logged([*pip, "download", "--no-binary", ":all:", "--no-deps", f"llama-cpp-python=={version}",
                         "-d", str(sdist_dir)])
        prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
        keep = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "LICENSE")
        log(f"extracting {', '.join(keep)} of {prefix} into {CONVERTER.relative_to(ROOT)}")
        with tarfile.open(sdist) as tar:
            members = []
            for m in tar.getmembers():
                if m.name.startswith(prefix) and m.name[len(prefix):].startswith(keep) and (m.isfile() or m.isdir()):
                    m.name = m.name[len(prefix):]
                    members.append(m)
            tar.extractall(CONVERTER, members=members, filter="data")
    # The converter imports torch, transformers (AutoConfig, AutoTokenizer for the vocabulary),
    # numpy and gguf-py (+ its tqdm, pyyaml, requests), and sentencepiece: a Llama's vocabulary
    # is first tried as a tokenizer.model, and that import comes before the check for the file
    # (protobuf is not needed: write_vocab writes no tokenizer.model). The same torch and
    # transformers as this venv's, so the checkpoint reads the same.
    need = [f"torch=={_dist_version('torch')}", f"transformers=={_dist_version('transformers')}", "numpy",
            "sentencepiece", str(CONVERTER / "gguf-py")]
    ok = subprocess.run([str(PEER_PY), "-c", "import torch, transformers, gguf, numpy, sentencepiece"],
                        capture_output=True)
    if ok.returncode != 0:
        _run_logged([*pip, "install", *need])
    log("peers ready: " + subprocess.run(
        [str(PEER_PY), "-c", "import llama_cpp, torch, transformers; print('llama_cpp', llama_cpp.__version__, "
         "'torch', torch.__version__, 'transformers', transformers.__version__)"],
        capture_output=True, text=True).stdout.strip())


def peer_missing() -> str | None:
    """Why the llama.cpp rows cannot run, or None."""
    if not PEER_PY.exists():
        return "no peer venv build/peers/llama; run python benchmarks/llm.py --install-peers"
    r = subprocess.run([str(PEER_PY), "-c", "import llama_cpp"], capture_output=True, text=True)
    if r.returncode != 0:
        return "llama_cpp does not import in build/peers/llama; run python benchmarks/llm.py --install-peers"
    return None


# ---------------------------------------------------------------------------------------------
# Model preparation: checkpoint, vocabulary, GGUF files (cached under build/llm/<model>/)

def write_vocab(path: Path, vocab_size: int) -> None:
    """A Llama-style tokenizer (byte-fallback BPE, SentencePiece-like normalizer) from code:
    the three specials, the 256 byte tokens <0x00>..<0xFF>, then placeholder pieces. Nothing in
    the benchmark tokenizes text; the GGUF file needs a token list of the model's vocab size."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": N_SPECIAL + b for b in range(256)})
    for i in range(vocab_size - len(vocab)):
        vocab[f"\u2581p{i}"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    hf.save_pretrained(path)


def prepare(model: str) -> tuple[Path, dict[str, str]]:
    """Returns the checkpoint folder and {gguf type: path or 'missing: reason'}."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    root = CACHE / model
    hf = root / "hf"
    if not (hf / "config.json").exists():
        log(f"building {model} {MODELS[model]} (torch.manual_seed(0)) -> {hf.relative_to(ROOT)}")
        torch.manual_seed(0)
        m = LlamaForCausalLM(LlamaConfig(**MODELS[model])).eval()
        m.save_pretrained(hf)
        write_vocab(hf, MODELS[model]["vocab_size"])
        del m
    ggufs: dict[str, str] = {}
    why = peer_missing()
    for t in GGUF_TYPES:
        out = root / f"model-{t}.gguf"
        if out.exists():
            ggufs[t] = str(out)
        elif why:
            ggufs[t] = f"missing: {why}"
        elif not (CONVERTER / "convert_hf_to_gguf.py").exists():
            ggufs[t] = "missing: no converter in build/peers/llama-convert; run --install-peers"
        else:
            tmp = out.with_suffix(".tmp")
            try:
                _run_logged([str(PEER_PY), str(CONVERTER / "convert_hf_to_gguf.py"), str(hf), "--outtype", t,
                             "--outfile", str(tmp)], stdout=subprocess.DEVNULL)
                tmp.rename(out)
                ggufs[t] = str(out)
            except subprocess.CalledProcessError as e:
                ggufs[t] = f"missing: convert_hf_to_gguf.py --outtype {t} failed (exit {e.returncode})"
    for t, ftype in QUANTIZED_GGUF.items():
        out = root / f"model-{t}.gguf"
        if out.exists():
            ggufs[t] = str(out)
        elif ggufs["f32"].startswith("missing: "):
            ggufs[t] = ggufs["f32"]
        else:
            ggufs[t] = quantize_gguf(Path(ggufs["f32"]), out, ftype)
    return hf, ggufs


def quantize_gguf(src: Path, out: Path, ftype: int) -> str:
    """`out` quantised from `src` by llama.cpp (llama_model_quantize in the peer venv); its path,
    or "missing: reason"."""
    tmp = out.with_suffix(".tmp")
    code = ("import sys, llama_cpp\n"
            "p = llama_cpp.llama_model_quantize_default_params()\n"
            f"p.ftype = {ftype}\n"
            "sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))")
    try:
        _run_logged([str(PEER_PY), "-c", code, str(src), str(tmp)], stdout=subprocess.DEVNULL)
    except subprocess.CalledProcessError as e:
        return f"missing: llama_model_quantize to {out.stem} failed (exit {e.returncode})"
    tmp.rename(out)
    return str(out)


def prompt_ids(length: int, vocab: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed * 1000 + length)
    return [rng.randrange(FIRST_ID, vocab) for _ in range(length)]


def has_int8_activations() -> bool:
    """Whether updraft.CompilerConfig takes activation_dtype="int8" (an older tree in an A/B run
    may not): the `_act` rows need it."""
    import updraft

    try:
        updraft.CompilerConfig(activation_dtype="int8")
    except (TypeError, ValueError):  # no such field, or not this value
        return False
    return "int8" in weight_dtypes()


def weight_dtypes() -> list[str]:
    """The `weight_dtype` values updraft.CompilerConfig accepts besides its default ([] when it
    has no such field): its own vocabulary when config.py exports one, else the values that
    construct without an error."""
    import dataclasses

    import updraft
    from updraft import config as ucfg

    fields = {f.name: f for f in dataclasses.fields(updraft.CompilerConfig)}
    if "weight_dtype" not in fields:
        return []
    default = updraft.CompilerConfig().weight_dtype
    for name in dir(ucfg):
        if "WEIGHT_DTYPE" in name.upper() and isinstance(getattr(ucfg, name), (tuple, list, dict, frozenset)):
            return [str(v) for v in getattr(ucfg, name) if v != default]
    ok = []
    for v in ("bf16", "fp16", "int8", "int4"):
        try:
            updraft.CompilerConfig(weight_dtype=v)
            ok.append(v)
        except Exception:
            pass
    return [v for v in ok if v != default]


def model_dtypes() -> list[str]:
    """The dtypes `updraft.quantize_weights` stores a model's own weights in (an older tree's
    vocabulary may lack int4)."""
    try:
        from updraft.quantize import DTYPES
    except ImportError:  # an updraft without quantize_weights' vocabulary: the weight_dtypes
        return weight_dtypes()
    return list(DTYPES)


# ---------------------------------------------------------------------------------------------
# Workers (one per process). Each returns {"runs": [{plen, prompt_s, decode_ms, tokens}], ...}.

def _vmhwm_mb() -> float:
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def torch_worker(spec: dict) -> dict:
    backend, threads = spec["backend"], spec["threads"]
    if backend.startswith("updraft"):
        import updraft  # noqa: F401  (first: its OpenMP wait policy must precede torch's libgomp)
    import torch
    from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(spec["hf"], dtype=torch.float32).eval()
    gen = model.generation_config
    gen.eos_token_id, gen.pad_token_id = None, 0  # random weights: no early stop, every run is --new-tokens long
    if backend in ("inductor",) or backend.startswith("updraft_static"):
        gen.cache_implementation = "static"
    res: dict = {}
    # "<row>_act": the same row with CompilerConfig(activation_dtype="int8") (int8 x int8 linears).
    int8_act = backend.endswith(ACT_SUFFIX)
    base = backend[:-len(ACT_SUFFIX)] if int8_act else backend
    if base.startswith("updraft_quantized_"):  # the model's own weights stored compactly, f32 released
        import updraft

        res["quantized"] = str(updraft.quantize_weights(model, base[len("updraft_quantized_"):])).splitlines()[0]
    # The serving peak starts here: the model is loaded (and quantised); what loading held and
    # freed (a quantised model's f32 weights) is in load_peak_mb only.
    import gc

    gc.collect()
    res["load_peak_mb"] = _vmhwm_mb()
    suite.reset_peak_rss()
    if backend == "inductor":
        model.forward = torch.compile(model.forward)
    elif backend.startswith("updraft"):
        opts: dict = {"num_threads": threads}
        if base.startswith("updraft_static_"):
            opts["weight_dtype"] = base[len("updraft_static_"):]
        if int8_act:
            opts["activation_dtype"] = "int8"
        model.forward = torch.compile(model.forward, backend="updraft", options=opts)

    class Stamps(LogitsProcessor):
        def __init__(self):
            self.t: list[float] = []

        def __call__(self, input_ids, scores):
            self.t.append(time.perf_counter())
            return scores

    def generate(ids: list[int], new_tokens: int = spec["new_tokens"]) -> dict:
        x = torch.tensor([ids])
        st = Stamps()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                                 do_sample=False, logits_processor=LogitsProcessorList([st]))
        t1 = time.perf_counter()
        toks = out[0, len(ids):].tolist()
        return {"plen": len(ids), "prompt_s": st.t[0] - t0, "wall_s": t1 - t0, "tokens": toks,
                "decode_ms": (st.t[-1] - st.t[0]) / (len(st.t) - 1) * 1e3}

    res["runs"] = []
    for plen in spec["prompt_lens"]:
        ids = prompt_ids(plen, spec["vocab"])
        first = generate(ids)  # compiles (prefill and decode graphs)
        res.setdefault("first_call_s", first["wall_s"])
        for _ in range(WARM_PREFILLS):  # past inference="auto"'s trials of the prefill graph
            generate(ids, 2)
        res["runs"].append(generate(ids))
    if backend.startswith("updraft"):
        import updraft

        rep = updraft.last_report()
        if rep is not None:
            res["engine_ops"] = f"{rep.num_engine_compute}/{rep.num_engine_compute + rep.num_fallback_compute}"
    res["serving_peak_mb"] = _vmhwm_mb()
    res["vmhwm_mb"] = max(res["serving_peak_mb"], res["load_peak_mb"])
    res["wait"] = _wait_env()
    return res


def _wait_env() -> str:
    """The OpenMP wait setting this process runs with (updraft's import may have set it)."""
    got = [f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ]
    return " ".join(got) or "libgomp default"


def llama_worker(spec: dict) -> dict:
    """Runs in the peer venv: llama-cpp-python, greedy, prompt and decode timed separately."""
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    threads = spec["threads"]
    n_ctx = max(spec["prompt_lens"]) + spec["new_tokens"] + 8
    llm = Llama(model_path=spec["gguf"], n_ctx=n_ctx, n_batch=max(spec["prompt_lens"]), n_threads=threads,
                n_threads_batch=threads, seed=0, verbose=False)

    n_vocab = llm.n_vocab()

    def argmax_last() -> int:  # Llama.scores is only filled with logits_all=True
        return int(np.argmax(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))))

    def generate(ids: list[int]) -> dict:
        llm.reset()
        llama_cpp.llama_perf_context_reset(llm.ctx)
        t0 = time.perf_counter()
        llm.eval(ids)
        tok = argmax_last()
        t1 = time.perf_counter()
        toks = [tok]
        for _ in range(spec["new_tokens"] - 1):
            llm.eval([tok])
            tok = argmax_last()
            toks.append(tok)
        t2 = time.perf_counter()
        own = llama_cpp.llama_perf_context(llm.ctx)  # llama.cpp's own timings of the same calls
        return {"plen": len(ids), "prompt_s": t1 - t0, "wall_s": t2 - t0, "tokens": toks,
                "decode_ms": (t2 - t1) / (len(toks) - 1) * 1e3,
                "own": f"llama.cpp's own: prompt {own.t_p_eval_ms:.1f} ms / {own.n_p_eval} tokens, "
                       f"decode {own.t_eval_ms / max(own.n_eval, 1):.2f} ms/token"}

    res: dict = {"runs": []}
    for plen in spec["prompt_lens"]:
        ids = prompt_ids(plen, spec["vocab"])
        first = generate(ids)
        res.setdefault("first_call_s", first["wall_s"])
        res["runs"].append(generate(ids))
    res["system_info"] = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    res["vmhwm_mb"] = _vmhwm_mb()
    res["wait"] = _wait_env()
    return res


def zoo_worker(spec: dict) -> dict:
    """updraft on a zoo model (the wait-policy runs): median ms of `iters` calls after warm-up."""
    import updraft  # noqa: F401  (first, as above)
    import torch
    from updraft import zoo

    torch.set_num_threads(spec["threads"])
    model, inputs = zoo.build(spec["zoo"], batch=spec["batch"])
    with torch.no_grad():
        fast = torch.compile(model, backend="updraft", options={"num_threads": spec["threads"]})
        fast(*inputs)
        ts = suite._time_calls(lambda: fast(*inputs), 0.0, spec["iters"], spec["iters"], 10)
    return {"runs": [{"decode_ms": statistics.median(ts)}], "vmhwm_mb": _vmhwm_mb()}


def _memory_guard(min_free_mb: float, result_path: str) -> None:
    """Ends this process when the machine's MemAvailable falls below `min_free_mb`: a 1B model
    with several weight copies can exhaust a shared machine, and the kernel's OOM killer would
    then pick some other process. The row reports why."""
    import threading

    def watch():
        while True:
            try:
                avail = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemAvailable:")) / 1024
            except (OSError, StopIteration):
                return
            if avail < min_free_mb:
                with open(result_path, "w") as f:
                    json.dump({"error": f"stopped by --min-free-mb: the machine had {avail:.0f} MB available "
                                        f"at {_vmhwm_mb():.0f} MB peak RSS of this process"}, f)
                os._exit(3)
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()


def worker(spec: dict, result_path: str) -> dict:
    if spec.get("min_free_mb"):
        _memory_guard(spec["min_free_mb"], result_path)
    if spec.get("boost"):
        suite.boost_priority()  # before any runtime starts its threads: they inherit the nice value
    kind = spec["kind"]
    return {"torch": torch_worker, "llama": llama_worker, "zoo": zoo_worker}[kind](spec)


# ---------------------------------------------------------------------------------------------
# Driver

def package_dir() -> Path:
    """The updraft package this process imports (the installed one after scripts/setup.sh; a
    built tree's python/updraft when PYTHONPATH names it). Exits with the fix when it has no
    built extension."""
    import importlib.util

    spec = importlib.util.find_spec("updraft")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("[llm] updraft is not importable: run scripts/setup.sh")
    pkg = Path(list(spec.submodule_search_locations)[0])
    if not list(pkg.glob("_C*")):
        raise SystemExit(f"[llm] {pkg} has no built extension (_C*): run scripts/setup.sh, or put a built "
                         "tree's python/ on PYTHONPATH")
    return pkg


def package_stamp(pkg: Path) -> dict[str, tuple[int, int]]:
    """Size and modification time of every file of the package: a row whose workers may have
    imported a changed package (in session 50 one started while python/updraft was half edited,
    its Python newer than its engine, and ran every int4 matmul in eager, 20x slower) is
    discarded, and the run stops."""
    return {str(f.relative_to(pkg)): (f.stat().st_size, f.stat().st_mtime_ns)
            for f in sorted(pkg.rglob("*")) if f.is_file() and "__pycache__" not in f.parts}


def child_env(threads: int, spin: str | None) -> dict:
    """The user's environment as it was before updraft was imported here, with the thread count
    and, when given, one OpenMP wait setting (passive, or a GOMP_SPINCOUNT); updraft from
    PACKAGE."""
    env = dict(USER_ENV, OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join(p for p in [str(PACKAGE), USER_ENV.get("PYTHONPATH")] if p))
    if spin is not None:
        env.pop("OMP_WAIT_POLICY", None)
        env.pop("GOMP_SPINCOUNT", None)
        if spin == "passive":
            env["OMP_WAIT_POLICY"] = "passive"
        else:
            env["GOMP_SPINCOUNT"] = spin
    return env


def run_row(spec: dict, env: dict, logs: Path, timeout: float) -> dict:
    python = str(PEER_PY) if spec["kind"] == "llama" else sys.executable
    name = f"{spec.get('model', spec.get('zoo'))}-{spec['backend']}-{spec['threads']}t-{int(time.time() * 1e3)}"
    return suite._run_child(spec, timeout, env, logs / f"{name}.log", script=Path(__file__).resolve(),
                            python=python, done_key="runs")


def _hog() -> subprocess.Popen:
    """A busy-looping neighbour at the same priority as a --boost worker (its own autogroup)."""
    code = ("import os\ntry:\n open('/proc/self/autogroup','w').write('-20')\nexcept OSError:\n pass\n"
            "while True:\n pass\n")
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def aggregate(rows: list[dict]) -> list[dict]:
    """One entry per (model, threads, backend, prompt length) over its runs."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["threads"], r["backend"])
        if r["status"] != "ok":
            out.setdefault(key + (None,), {"model": r["model"], "threads": r["threads"], "backend": r["backend"],
                                           "plen": None, "status": r["status"], "decode": [], "prompt": [],
                                           "rss": [], "first": [], "tokens": None})
            continue
        for run in r["runs"]:
            a = out.setdefault(key + (run["plen"],), {"model": r["model"], "threads": r["threads"],
                                                      "backend": r["backend"], "plen": run["plen"], "status": "ok",
                                                      "decode": [], "prompt": [], "rss": [], "first": [],
                                                      "tokens": run["tokens"], "notes": ""})
            a["decode"].append(run["decode_ms"])
            a["prompt"].append(run["plen"] / run["prompt_s"])
            a["rss"].append(r.get("vmhwm_mb", r["peak_rss_mb"]))
            a.setdefault("serving", []).append(r.get("serving_peak_mb", a["rss"][-1]))
            a["first"].append(r["first_call_s"])
            notes = [f"engine ops {r['engine_ops']}" if r.get("engine_ops") else "", r.get("wait", ""),
                     run["own"] + " (last run)" if run.get("own") else ""]
            a["notes"] = "; ".join(n for n in notes if n)
    aggs = list(out.values())
    for a in aggs:  # a backend that failed in one run but not in another keeps its good runs
        if a["status"] != "ok" and any(b["status"] == "ok" and b["model"] == a["model"] and b["threads"] == a["threads"]
                                       and b["backend"] == a["backend"] for b in aggs):
            a["drop"] = True
    return [a for a in aggs if not a.get("drop")]


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def table(aggs: list[dict], backends: list[str]) -> str:
    out = []
    for model in dict.fromkeys(a["model"] for a in aggs):
        for threads in dict.fromkeys(a["threads"] for a in aggs if a["model"] == model):
            rs = [a for a in aggs if a["model"] == model and a["threads"] == threads]
            plens = sorted({a["plen"] for a in rs if a["plen"] is not None})
            for plen in plens:
                eager = next((a["tokens"] for a in rs if a["backend"] == "eager" and a["plen"] == plen), None)
                out.append(f"### {model}, {threads} thread{'s' if threads > 1 else ''}, {plen}-token prompt\n")
                out.append("| backend | decode ms/token (min-max) | decode tokens/s | prompt tokens/s (min-max) | "
                           "peak RSS GB | serving peak GB | first call s | = eager | notes |")
                out.append("|---|---|---|---|---|---|---|---|---|")
                for b in backends:
                    a = next((a for a in rs if a["backend"] == b and a["plen"] in (plen, None)), None)
                    if a is None:
                        continue
                    if a["status"] != "ok":
                        reason = a["status"].replace("|", "\\|")
                        out.append(f"| {b} | — | — | — | — | — | — | — | {reason} |")
                        continue
                    d, p = a["decode"], a["prompt"]
                    same = "—"
                    if eager is not None:
                        n = next((i for i, (x, y) in enumerate(zip(a["tokens"], eager)) if x != y), len(eager))
                        same = f"{n}/{len(eager)}"
                    out.append(f"| {b} | {_med(d):.1f} ({min(d):.1f}-{max(d):.1f}) | {1e3 / _med(d):.1f} | "
                               f"{_med(p):.0f} ({min(p):.0f}-{max(p):.0f}) | {max(a['rss']) / 1024:.2f} | "
                               f"{max(a.get('serving') or a['rss']) / 1024:.2f} | "
                               f"{_med(a['first']):.1f} | {same} | {a.get('notes') or ''} |")
                out.append("")
    return "\n".join(out)


def chart(aggs: list[dict], backends: list[str], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"chart not drawn: matplotlib unavailable ({type(e).__name__}: {e}); pip install matplotlib"
    groups = list(dict.fromkeys((a["model"], a["threads"]) for a in aggs))
    fig, axes = plt.subplots(len(groups), 2, figsize=(12, 0.45 * len(backends) * len(groups) + 1.5), squeeze=False)
    for (model, threads), row in zip(groups, axes):
        rs = [a for a in aggs if a["model"] == model and a["threads"] == threads]
        plen = min((a["plen"] for a in rs if a["plen"] is not None), default=None)
        bs = [b for b in backends if any(a["backend"] == b for a in rs)]
        for ax, what, label in ((row[0], "decode", "decode tokens/s"), (row[1], "prompt", f"prompt tokens/s ({plen} tokens)")):
            vals, lo, hi = [], [], []
            for b in bs:
                a = next((a for a in rs if a["backend"] == b and a["plen"] == plen and a["status"] == "ok"), None)
                if a is None:
                    vals.append(0.0), lo.append(0.0), hi.append(0.0)
                    continue
                xs = [1e3 / d for d in a["decode"]] if what == "decode" else a["prompt"]
                m = _med(xs)
                vals.append(m), lo.append(m - min(xs)), hi.append(max(xs) - m)
            colors = ["tab:orange" if b.startswith("llamacpp") else "tab:green" if b.startswith("updraft")
                      else "tab:gray" for b in bs]
            ax.barh(range(len(bs)), vals, xerr=[lo, hi], color=colors)
            for i, (b, v) in enumerate(zip(bs, vals)):
                ax.text(v + hi[i], i, f" {v:.0f}" if v else " failed", va="center", fontsize=8,
                        color="black" if v else "red")
            ax.set_yticks(range(len(bs)))
            ax.set_yticklabels(bs)
            ax.invert_yaxis()
            ax.set_xlabel(label)
            ax.set_title(f"{model}, {threads} thread{'s' if threads > 1 else ''}: {label} "
                         "(median; whiskers: min-max)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return f"chart: {path}"


def wait_policy(args, logs: Path) -> str:
    """Rows: workloads; columns: wait settings; one table per load. Interleaved: for each round,
    each load, each setting, each workload one fresh process."""
    hf, _ = prepare(args.models[0])
    vocab = MODELS[args.models[0]]["vocab_size"]
    threads = int(args.threads[0])
    work = [("llm", dict(kind="torch", backend="updraft", model=args.models[0], hf=str(hf), vocab=vocab,
                         prompt_lens=[args.prompt_lens[0]], new_tokens=args.new_tokens))]
    for b in (1, 64):
        work.append((f"mlp b{b}", dict(kind="zoo", backend="updraft", zoo="mlp", batch=b, iters=args.zoo_iters)))
    res: dict = {}
    for rnd in range(args.runs):
        for load in args.loads:
            hogs = [_hog() for _ in range(load)]
            try:
                time.sleep(0.2 if hogs else 0)
                for spin in args.spins:
                    for name, spec in work:
                        spec = dict(spec, threads=threads, boost=args.boost)
                        row = run_row(spec, child_env(threads, spin), logs, args.timeout)
                        v = row["runs"][0]["decode_ms"] if row["status"] == "ok" else float("nan")
                        res.setdefault((name, load, spin), []).append(v)
                        log(f"round {rnd} load {load} spin {spin:>7} {name:<7} {v:8.3f} ms ({row['status']})")
            finally:
                for h in hogs:
                    h.kill()
                    h.wait()
    out = []
    for load in args.loads:
        out.append(f"### {threads} threads, {load} busy neighbour{'s' if load != 1 else ''}: "
                   f"median ms (min-max over {args.runs} runs)\n")
        out.append("| workload | " + " | ".join("passive" if s == "passive" else f"spin {s}" for s in args.spins) + " |")
        out.append("|---|" + "---|" * len(args.spins))
        for name, _ in work:
            unit = "ms/token" if name == "llm" else "ms/call"
            cells = []
            for s in args.spins:
                xs = [x for x in res[(name, load, s)] if x == x]
                cells.append(f"{_med(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "failed")
            label = f"{args.models[0]} decode {unit}" if name == "llm" else f"{name} {unit}"
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--install-peers", action="store_true",
                   help="create build/peers/llama (llama-cpp-python compiled by pip) and the GGUF converter, then exit")
    p.add_argument("--build-jobs", type=int, default=1, help="compile jobs for --install-peers (default 1)")
    p.add_argument("--models", nargs="+", default=["156m"], choices=list(MODELS))
    p.add_argument("--backends", nargs="+", help="default: every torch backend, updraft weight dtypes, llama.cpp")
    p.add_argument("--threads", type=lambda s: [int(x) for x in s.split(",")], default=[2, 1],
                   help="comma-separated thread counts (default 2,1)")
    p.add_argument("--prompt-lens", type=lambda s: [int(x) for x in s.split(",")], default=[32],
                   help="comma-separated prompt lengths (default 32; e.g. 32,128)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=3, help="fresh processes per row (default 3)")
    p.add_argument("--spin", help="one OpenMP wait setting for every row: passive or a GOMP_SPINCOUNT")
    p.add_argument("--min-free-mb", type=float, default=1500,
                   help="a row stops when the machine's available memory falls below this (default 1500)")
    p.add_argument("--boost", action="store_true", help="raise the workers' CPU priority (root only; see suite.py)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per process before its row fails")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "BENCHMARKS.md", help="'-' for none")
    # The chart and the raw rows go beside the doc block they back; a run that writes no doc block
    # (a slice, an A/B) writes them only where asked, so it never replaces the committed ones.
    p.add_argument("--chart", type=Path, help="tokens/s PNG (default: docs/llm_benchmark.png with the doc "
                   "block, none with --doc -; '-' for none)")
    p.add_argument("--json", type=Path, help="raw rows (default: docs/llm_benchmark.json with the doc block, "
                   "none with --doc -; '-' for none)")
    p.add_argument("--wait-policy", action="store_true", help="measure OpenMP wait settings instead (see above)")
    p.add_argument("--spins", nargs="+", default=SPINS, help=f"wait settings for --wait-policy (default {SPINS})")
    p.add_argument("--loads", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1],
                   help="busy neighbours for --wait-policy (default 0,1)")
    p.add_argument("--zoo-iters", type=int, default=200)
    p.add_argument("--from-json", type=Path, nargs="+",
                   help="redraw the table, chart and doc block from --json files (their rows together)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    writes_doc = str(args.doc) != "-"
    for name, default in (("chart", "llm_benchmark.png"), ("json", "llm_benchmark.json")):
        given = getattr(args, name)
        setattr(args, name, None if str(given) == "-" else given or (ROOT / "docs" / default if writes_doc else None))

    if args.worker:
        spec = json.loads(args.worker)
        try:
            res = worker(spec, args.result)
        except BaseException as e:
            import traceback

            traceback.print_exc()
            msg = str(e).strip().splitlines()
            res = {"error": f"{type(e).__name__}: {msg[0][:300] if msg else ''}"}
        with open(args.result, "w") as f:
            json.dump(res, f)
        return 0

    if args.install_peers:
        install_peers(args.build_jobs)
        return 0

    cmdline = "python benchmarks/llm.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    logs = Path(tempfile.mkdtemp(prefix="updraft-llm-"))
    global PACKAGE
    if not args.from_json:  # a redraw runs no worker
        pkg = package_dir()
        PACKAGE = pkg.parent
        stamp = package_stamp(pkg)
    machine = suite._machine()
    priority = suite.boost_priority() if args.boost else "normal"
    load = os.getloadavg()
    print(f"# updraft LLM benchmark\n\nmachine: {machine}\n\npriority: {priority}; load average at start: "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n\nlogs: {logs}\n", flush=True)

    if args.wait_policy:
        body = wait_policy(args, logs)
        print(body)
        end = os.getloadavg()
        print(f"load average at the end: {end[0]:.1f} {end[1]:.1f} {end[2]:.1f}")
        return 0

    backends = args.backends or (TORCH_BACKENDS + [f"updraft_static_{d}" for d in weight_dtypes()]
                                 + [f"updraft_quantized_{d}" for d in model_dtypes()]
                                 + ([f"updraft_quantized_{d}{ACT_SUFFIX}" for d in ("int8", "int4") if d in model_dtypes()]
                                    if has_int8_activations() else [])
                                 + LLAMA_BACKENDS)
    rows: list[dict] = []
    meta = {"machine": machine, "priority": priority, "load_start": load[0],
            "command": cmdline.strip(), "date": time.strftime("%Y-%m-%d %H:%M")}
    if args.from_json:
        metas = []
        for f in args.from_json:
            saved = json.loads(f.read_text())
            rows += saved["rows"] if isinstance(saved, dict) else saved
            metas.append(saved["meta"] if isinstance(saved, dict) else meta)
        meta = dict(metas[0], command="`; `".join(m["command"] for m in metas),
                    date=", ".join(dict.fromkeys(m["date"] for m in metas)),
                    load_start=min(m["load_start"] for m in metas),
                    load_end=max(m.get("load_end", m["load_start"]) for m in metas))
        backends = list(dict.fromkeys(r["backend"] for r in rows))
        args.runs = max(r["run"] for r in rows) + 1
        args.new_tokens = len(next(x["tokens"] for r in rows if r["status"] == "ok" for x in r["runs"]))
    stopped = ""
    for model in ([] if args.from_json else args.models):
        if stopped:  # not even the next model's checkpoint and GGUF files
            break
        hf, ggufs = prepare(model)
        vocab = MODELS[model]["vocab_size"]
        for threads in args.threads:
            for run in range(args.runs):
                for b in backends:  # round-robin: one process per backend, then the next run
                    if stopped:
                        continue
                    spec = dict(backend=b, model=model, threads=threads, vocab=vocab, boost=args.boost,
                                min_free_mb=args.min_free_mb,
                                prompt_lens=args.prompt_lens, new_tokens=args.new_tokens)
                    if b.startswith("llamacpp_"):
                        g = ggufs[b[len("llamacpp_"):]]
                        if g.startswith("missing: "):
                            row = {"status": "not run: " + g[len("missing: "):], "peak_rss_mb": float("nan")}
                        else:
                            row = run_row(dict(spec, kind="llama", gguf=g), child_env(threads, args.spin), logs,
                                          args.timeout)
                    else:
                        row = run_row(dict(spec, kind="torch", hf=str(hf)), child_env(threads, args.spin), logs,
                                      args.timeout)
                    row.update(model=model, backend=b, threads=threads, run=run)
                    now = package_stamp(pkg)
                    changed = [f for f in sorted(now.keys() | stamp.keys()) if now.get(f) != stamp.get(f)]
                    if changed and not stopped:
                        stopped = f"updraft ({pkg}) changed during the run: {', '.join(changed[:3])}"
                        log(f"{stopped}; this row is discarded and no further row runs")
                    if stopped:
                        row = dict(row, status="discarded: " + stopped, runs=[])
                    rows.append(row)
                    brief = (", ".join(f"p{x['plen']}: {x['decode_ms']:.1f} ms/token, {x['plen'] / x['prompt_s']:.0f} "
                                       f"prompt tok/s" for x in row["runs"]) if row["status"] == "ok" else row["status"])
                    # The worker's own VmHWM, the table's figure: run_row's wait4 ru_maxrss read
                    # 998 MB for every row of session 31's run, eager's 0.85 GB included.
                    rss = row.get("vmhwm_mb", row["peak_rss_mb"])
                    log(f"{model} {threads}t run {run} {b:<22} {brief} (rss {rss:.0f} MB, "
                        f"{row.get('wall_s', 0):.0f} s)")
    if not args.from_json:
        meta["load_end"] = os.getloadavg()[0]
    aggs = aggregate(rows)
    body = table(aggs, backends)
    info = next((r["system_info"] for r in rows if r.get("system_info")), None)
    print(body)
    notes = [chart(aggs, backends, args.chart) if args.chart else "chart not drawn (--chart PATH draws one)"]
    if args.json and not args.from_json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        notes.append(f"raw rows: {args.json}")
    print("\n".join(notes))
    if writes_doc:
        rel = lambda q: os.path.relpath(q, args.doc.parent)  # noqa: E731
        runs = ", ".join(f"{m} {max(r['run'] for r in rows if r['model'] == m) + 1}"
                         for m in dict.fromkeys(r["model"] for r in rows))
        loads = (f"; load average {meta['load_start']:.1f} at the start, {meta['load_end']:.1f} at the end"
                 if "load_end" in meta and not args.from_json else
                 f"; load average {meta['load_start']:.1f}-{meta['load_end']:.1f} at the starts and ends of the runs"
                 if "load_end" in meta else "")
        doc_body = (f"Machine: {meta['machine']}\n\nPriority: {meta['priority']}{loads}\n\n" +
                    (f"llama.cpp: `{info}`\n\n" if info else "") +
                    f"Command: `{meta['command']}` ({meta['date']}; fresh processes per row, interleaved: {runs}; "
                    f"{args.new_tokens} new tokens)\n\n{body}\n" +
                    (f"![decode and prompt tokens/s]({rel(args.chart)})\n" if args.chart else ""))
        suite.write_doc(args.doc, doc_body, "<!-- llm:begin -->", "<!-- llm:end -->", "Issue 20: LLM benchmark")
        print(f"updated {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
