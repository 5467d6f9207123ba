"""OpInfo sweep: every entry of PyTorch's OpInfo database through torch.compile(backend="updraft").

    python tools/opinfo_sweep.py                          # float32 only, every op, all samples
    python tools/opinfo_sweep.py --dtypes float32,float64,int64,bool --write docs/COVERAGE.md
    python tools/opinfo_sweep.py --ops add,nn.functional.gelu --max-samples-per-op 3 -v
    python tools/opinfo_sweep.py --out sweep.json

Each sample (op, dtype, SampleInput) is run eagerly and through
`torch.compile(f, backend="updraft", fullgraph=True)` on the CPU and ends in one outcome:

- ENGINE     matched eager, and every compute op of the graph ran in the engine
- FALLBACK   matched eager, and at least one compute op ran in PyTorch (a partition that failed
             to build or run counts as PyTorch)
- NO_COMPUTE matched eager, and the graph had no compute op (views, metadata, constants)
- WRONG      the compiled result differs from eager beyond the tolerance below
- CRASH      the compiled call raised where eager did not
- DYNAMO     Dynamo could not trace the call with fullgraph=True (graph break, unsupported
             construct): not an updraft failure
- TORCH      WRONG or CRASH, but the same happens with updraft's decompositions and no engine
             (aot_autograd + eager forward): a PyTorch/AOTAutograd issue, not an updraft one
- SKIP       eager raised on this sample (an error-input sample, not our bug)

Outputs that are random (eager differs from itself under a different seed) or uninitialised
(empty*) are compared on shape and dtype only.

Tolerances (rtol, atol), per dtype of the result, and why:
- float32 (1e-4, 1e-5): the engine's vectorised exp/log/tanh/erf are a few ulp off libm; its
  reductions sum in blocked order; oneDNN GEMM/conv accumulate in another order (notes §4).
  Samples are small (OpInfo's S=5, M=10), so errors stay well inside this.
- float64 (1e-7, 1e-7): torch's assert_close default; the engine's f64 kernels are reference
  loops, exact up to summation order.
- float16 / bfloat16 (rtol 1e-3 / 1.6e-2, atol 1e-5): assert_close's defaults, about one ulp of the
  result's dtype; as --dtypes, or reached through ops that cast internally. The engine's kernels
  compute in f32 and f64, so most half-precision arithmetic runs in PyTorch (FALLBACK) and tests
  the partition and fallback path; what the engine takes is mostly data movement (cat, gather,
  pad, flip, index ops), casts, comparisons and reductions.
- integer and bool: exact.
NaN compares equal to NaN in the same position.

Dynamo state is reset before every sample, so each compile is static-shaped and no recompile
limit is reached. "core aten" ops are the OpInfos whose aten op has an overload tagged
torch.Tag.core.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import io
import json
import os
import sys
import time
import traceback
import warnings
from typing import Any, Optional

import torch
import torch.utils._pytree as pytree

OUTCOMES = ["ENGINE", "FALLBACK", "NO_COMPUTE", "WRONG", "CRASH", "DYNAMO", "TORCH", "SKIP"]
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16, "int64": torch.int64, "bool": torch.bool}
TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-7),
              torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}


@dataclasses.dataclass
class SampleResult:
    op: str
    dtype: str
    index: int
    outcome: str
    detail: str = ""
    core: bool = False
    engine_compute: int = 0
    fallback_compute: int = 0
    fallback_ops: list = dataclasses.field(default_factory=list)
    reasons: dict = dataclasses.field(default_factory=dict)  # fallback op -> first reason


# ---------------------------------------------------------------------------------------------
# The op database


def op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db as db
    return list(db)


def full_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


_CORE: dict = {}


def is_core_aten(op: Any) -> bool:
    """True when the OpInfo's aten op has an overload tagged core (torch.Tag.core)."""
    name = op.aten_name or op.name
    if name not in _CORE:
        packet = getattr(torch.ops.aten, name.split(".")[-1], None) if "." not in name else None
        core = False
        if packet is not None:
            for ov in packet.overloads():
                if torch.Tag.core in getattr(packet, ov).tags:
                    core = True
                    break
        _CORE[name] = core
    return _CORE[name]


def select_ops(filters: Optional[list[str]]) -> list:
    ops = op_db()
    if not filters:
        return ops
    wanted = set(filters)
    return [op for op in ops if full_name(op) in wanted or op.name in wanted]


# ---------------------------------------------------------------------------------------------
# One sample


def _clone(tree: Any) -> Any:
    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


def _call_maker(op: Any, sample: Any):
    """A function of the sample's tensors only (compiled), and those tensors.

    Non-tensor arguments (dims, scalars, dtypes) stay Python constants, as a user's code has them.
    """
    tree = (sample.input, tuple(sample.args), dict(sample.kwargs))
    leaves, spec = pytree.tree_flatten(tree)
    pos = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    const = list(leaves)
    fn = op.op

    def f(*tensors: torch.Tensor) -> Any:
        vals = list(const)
        for i, t in zip(pos, tensors):
            vals[i] = t
        inp, args, kwargs = pytree.tree_unflatten(vals, spec)
        return fn(inp, *args, **kwargs)

    return f, [leaves[i] for i in pos]


def _meta_only(x: Any) -> Any:
    return pytree.tree_map(lambda t: (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t, x)


def compare(got: Any, want: Any) -> Optional[str]:
    """None if `got` matches `want` (per-dtype tolerances above), else the mismatch text."""
    try:
        gl, gs = pytree.tree_flatten(got)
        wl, ws = pytree.tree_flatten(want)
        if gs != ws:
            return f"output structure {gs} differs from eager's {ws}"
        for i, (g, w) in enumerate(zip(gl, wl)):
            if isinstance(w, torch.Tensor):
                if not isinstance(g, torch.Tensor):
                    return f"output {i}: {type(g).__name__}, eager gives a tensor"
                rtol, atol = TOLERANCES.get(w.dtype, (0.0, 0.0))
                torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                           check_device=True, check_dtype=True,
                                           check_layout=True, check_stride=False)
            elif isinstance(w, (bool, int, float, complex)) and not isinstance(g, torch.Tensor):
                torch.testing.assert_close(g, w, equal_nan=True)
            elif g != w:
                return f"output {i}: {g!r}, eager gives {w!r}"
    except AssertionError as e:
        return " ".join(str(e).split())[:400]
    return None


def _seeded(fn, args: list, seed: int) -> Any:
    torch.manual_seed(seed)
    return fn(*_clone(args))


def _reference_backend(gm, example_inputs):
    """updraft's front half without the engine: same decompositions, graph runs in PyTorch."""
    from torch._dynamo.backends.common import aot_autograd
    from updraft.backend import decompositions

    def run(g, _):
        return g.forward
    return aot_autograd(decompositions=decompositions(), fw_compiler=run,
                        inference_compiler=run)(gm, example_inputs)


def _is_dynamo_error(e: BaseException) -> bool:
    from torch._dynamo import exc

    if isinstance(e, exc.BackendCompilerFailed):
        return False
    return isinstance(e, (exc.Unsupported, exc.UserError, exc.TorchRuntimeError,
                          exc.InternalTorchDynamoError)) or type(e).__module__.startswith(
                              "torch._dynamo")


def run_sample(op: Any, sample: Any, dtype: torch.dtype, index: int) -> SampleResult:
    import updraft
    from updraft import report as report_mod

    name = full_name(op)
    res = SampleResult(name, str(dtype).replace("torch.", ""), index, "SKIP",
                       core=is_core_aten(op))
    f, tensors = _call_maker(op, sample)
    try:
        with torch.no_grad():
            want = _seeded(f, tensors, 0)
            other = _seeded(f, tensors, 1)
    except Exception as e:
        res.detail = f"eager raised {type(e).__name__}: {str(e)[:200]}"
        return res
    random_out = op.has_nondeterministic_output or compare(other, want) is not None

    torch._dynamo.reset()
    report_mod._last[0] = None
    try:
        with torch.no_grad():
            cf = torch.compile(f, backend="updraft", fullgraph=True)
            got = _seeded(cf, tensors, 0)
    except Exception as e:
        if _is_dynamo_error(e):
            res.outcome = "DYNAMO"
            res.detail = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            return res
        res.outcome = "CRASH"
        res.detail = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        return _recheck_with_reference(res, f, tensors, want, random_out)

    rep = updraft.last_report()
    if rep is not None:
        failed = {p.name for p in rep.failed_partitions}
        res.engine_compute = rep.num_engine_compute
        res.fallback_compute = rep.num_fallback_compute
        res.fallback_ops = sorted(rep.fallback_ops)
        res.reasons = {o: rs[0][:200] for o, rs in rep.reasons.items() if rs}
        if failed:  # a partition that failed to build or run ran in PyTorch
            res.fallback_compute += sum(p.num_compute_ops for p in rep.failed_partitions)
            res.engine_compute -= sum(p.num_compute_ops for p in rep.failed_partitions)
            res.fallback_ops.append("partition failed: " + rep.failed_partitions[0].status[:120])
    mismatch = compare(_meta_only(got), _meta_only(want)) if random_out else compare(got, want)
    if mismatch is not None:
        res.outcome = "WRONG"
        res.detail = mismatch
        return _recheck_with_reference(res, f, tensors, want, random_out)
    if res.engine_compute == 0 and res.fallback_compute == 0:
        res.outcome = "NO_COMPUTE"
    elif res.fallback_compute == 0:
        res.outcome = "ENGINE"
    else:
        res.outcome = "FALLBACK"
    if random_out:
        res.detail = "random/uninitialised output: compared shape and dtype only"
    return res


def _recheck_with_reference(res: SampleResult, f, tensors, want, random_out) -> SampleResult:
    """A WRONG/CRASH that also happens without the engine is PyTorch's (TORCH)."""
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            got = _seeded(torch.compile(f, backend=_reference_backend, fullgraph=True), tensors, 0)
    except Exception as e:
        res.outcome = "TORCH"
        res.detail = f"without the engine too: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
        return res
    mismatch = compare(_meta_only(got), _meta_only(want)) if random_out else compare(got, want)
    if mismatch is not None:
        res.outcome = "TORCH"
        res.detail = "without the engine too: " + mismatch[:200]
    return res


def samples_of(op: Any, dtype: torch.dtype, max_samples: Optional[int]) -> list:
    torch.manual_seed(0)
    out = []
    for s in op.sample_inputs("cpu", dtype, requires_grad=False):
        out.append(s)
        if max_samples is not None and len(out) >= max_samples:
            break
    return out


def run_op(op: Any, dtype: torch.dtype, max_samples: Optional[int]) -> list[SampleResult]:
    name = full_name(op)
    try:
        samples = samples_of(op, dtype, max_samples)
    except Exception as e:
        return [SampleResult(name, str(dtype).replace("torch.", ""), -1, "SKIP",
                             f"sample_inputs raised {type(e).__name__}: {e}", is_core_aten(op))]
    results = []
    for i, s in enumerate(samples):
        try:
            results.append(run_sample(op, s, dtype, i))
        except Exception as e:  # the harness itself: report, keep going
            results.append(SampleResult(name, str(dtype).replace("torch.", ""), i, "CRASH",
                                        f"harness: {type(e).__name__}: {e}", is_core_aten(op)))
    torch._dynamo.reset()
    return results


@contextlib.contextmanager
def quiet():
    """Silences the backend's fallback warnings and torch's logging noise during a sweep."""
    import logging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        level = logging.getLogger("torch").level
        logging.getLogger("torch").setLevel(logging.ERROR)
        try:
            yield
        finally:
            logging.getLogger("torch").setLevel(level)


# ---------------------------------------------------------------------------------------------
# Totals and the coverage page


def totals(results: list[SampleResult]) -> dict:
    """Per dtype: outcome counts, plus core-aten counts and the core engine share."""
    out: dict = {}
    for r in results:
        d = out.setdefault(r.dtype, {"all": collections.Counter(), "core": collections.Counter()})
        d["all"][r.outcome] += 1
        if r.core:
            d["core"][r.outcome] += 1
    for d in out.values():
        for k in ("all", "core"):
            c = d[k]
            ran = c["ENGINE"] + c["FALLBACK"] + c["WRONG"] + c["CRASH"]
            d[k + "_engine_pct"] = 100.0 * c["ENGINE"] / ran if ran else 0.0
            d[k + "_ran"] = ran
    return out


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "-"


def _without_note(argv: list[str]) -> list[str]:
    """The command line as run, less --note (the note follows it in the header once)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--note":
            skip = True
        elif not a.startswith("--note="):
            out.append(a)
    return out


def coverage_markdown(results: list[SampleResult], argv: list[str], seconds: float,
                      note: str = "") -> str:
    t = totals(results)
    took = f", {seconds / 60:.1f} min" if seconds >= 1 else ""
    lines = [
        "# OpInfo coverage",
        "",
        "Generated by `python tools/opinfo_sweep.py " + " ".join(_without_note(argv)) + "` "
        f"(torch {torch.__version__}{took}). Do not edit by hand." + (f" {note}" if note else ""),
        "",
        "Every OpInfo entry of `torch.testing._internal.common_methods_invocations.op_db` on the "
        "CPU, through `torch.compile(f, backend=\"updraft\", fullgraph=True)`, compared with eager. "
        "Outcomes (definitions and tolerances: the docstring of `tools/opinfo_sweep.py`):",
        "",
        "- **ENGINE**: matched, every compute op ran in the engine; **FALLBACK**: matched, some "
        "compute op ran in PyTorch; **NO_COMPUTE**: matched, the graph has no compute op;",
        "- **WRONG** / **CRASH**: updraft's bug; **TORCH**: the same failure without the engine "
        "(PyTorch's); **DYNAMO**: fullgraph tracing failed; **SKIP**: eager raised.",
        "",
        "\"engine %\" = ENGINE / (ENGINE + FALLBACK + WRONG + CRASH): of the samples that reached "
        "updraft with compute to do, the share run entirely in the engine. \"core\" = ops whose aten "
        "op is tagged `torch.Tag.core`.",
        "",
        "## Totals",
        "",
        "| dtype | ops | samples | " + " | ".join(OUTCOMES) + " | engine % (all) | engine % (core aten) |",
        "|---|---|---|" + "---|" * len(OUTCOMES) + "---|---|",
    ]
    for dt in DTYPES:
        if dt not in t:
            continue
        c = t[dt]["all"]
        n_ops = len({r.op for r in results if r.dtype == dt})
        lines.append(f"| {dt} | {n_ops} | {sum(c.values())} | "
                     + " | ".join(str(c[o]) for o in OUTCOMES)
                     + f" | {t[dt]['all_engine_pct']:.1f}% ({c['ENGINE']}/{t[dt]['all_ran']})"
                     + f" | {t[dt]['core_engine_pct']:.1f}% ({t[dt]['core']['ENGINE']}/{t[dt]['core_ran']}) |")
    bad = [r for r in results if r.outcome in ("WRONG", "CRASH")]
    lines += ["", "## WRONG and CRASH samples", ""]
    if not bad:
        lines.append("None.")
    for r in bad:
        lines.append(f"- `{r.op}` {r.dtype} sample {r.index}: {r.outcome}: {r.detail[:300]}")

    lines += ["", "## Per op", "",
              "Counts per dtype as ENGINE/FALLBACK/NO_COMPUTE/WRONG/CRASH/DYNAMO/TORCH/SKIP; "
              "\"in PyTorch\" lists the aten ops that fell back (float32).", "",
              "| op | core | " + " | ".join(d for d in DTYPES if d in t) + " | in PyTorch |",
              "|---|---|" + "---|" * len([d for d in DTYPES if d in t]) + "---|"]
    by_op: dict = collections.OrderedDict()
    for r in results:
        by_op.setdefault(r.op, []).append(r)
    for name, rs in by_op.items():
        cells = []
        for dt in DTYPES:
            if dt not in t:
                continue
            c = collections.Counter(r.outcome for r in rs if r.dtype == dt)
            cells.append("/".join(str(c[o]) for o in OUTCOMES) if c else "n/a")
        fb = sorted({o for r in rs if r.dtype == "float32" for o in r.fallback_ops})
        fb_text = ", ".join(o.replace("|", "\\|") for o in fb)[:200]
        lines.append(f"| `{name}` | {'yes' if rs[0].core else ''} | " + " | ".join(cells)
                     + f" | {fb_text} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="float32",
                    help="comma list of " + ", ".join(DTYPES) + " (default float32)")
    ap.add_argument("--ops", default="", help="comma list of OpInfo names (name or name.variant)")
    ap.add_argument("--max-samples-per-op", type=int, default=None)
    ap.add_argument("--write", default="", help="write the coverage page here (docs/COVERAGE.md)")
    ap.add_argument("--out", default="", help="write every sample's result as JSON here")
    ap.add_argument("--from-json", default="",
                    help="comma list of --out files to merge instead of running (for --write)")
    ap.add_argument("--note", default="", help="a sentence for the page's header (how it was run)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every non-ENGINE sample")
    args = ap.parse_args(argv)

    names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in names if d not in DTYPES]
    if unknown:
        ap.error(f"--dtypes: unknown {', '.join(unknown)}; choose from {', '.join(DTYPES)}")
    dtypes = [DTYPES[d] for d in names]
    ops = select_ops([o.strip() for o in args.ops.split(",") if o.strip()] or None)
    t0 = time.perf_counter()
    results: list[SampleResult] = []
    if args.from_json:
        for path in args.from_json.split(","):
            with open(path) as fh:
                results += [SampleResult(**r) for r in json.load(fh)]
        dtypes = []
    with quiet():
        for dt in dtypes:
            for k, op in enumerate(ops):
                if dt not in op.supported_dtypes("cpu"):
                    continue
                rs = run_op(op, dt, args.max_samples_per_op)
                results += rs
                for r in rs:
                    if r.outcome in ("WRONG", "CRASH") or (args.verbose and r.outcome != "ENGINE"):
                        print(f"{r.outcome:9s} {r.op} {r.dtype} #{r.index}: {r.detail[:300]} "
                              f"{r.fallback_ops if r.outcome == 'FALLBACK' else ''}", flush=True)
                if (k + 1) % 50 == 0:
                    print(f"... {dt}: {k + 1}/{len(ops)} ops, "
                          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    t = totals(results)
    for dt, d in t.items():
        c = d["all"]
        print(f"{dt}: " + " ".join(f"{o}={c[o]}" for o in OUTCOMES)
              + f"  engine {d['all_engine_pct']:.1f}% of {d['all_ran']}"
              + f", core aten engine {d['core_engine_pct']:.1f}% of {d['core_ran']}")
    print(f"{len(results)} samples in {seconds:.0f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump([dataclasses.asdict(r) for r in results], fh, indent=1)
    if args.write:
        with open(args.write, "w") as fh:
            fh.write(coverage_markdown(results, argv, seconds, args.note))
    return 1 if any(r.outcome in ("WRONG", "CRASH") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
