"""updraft.debug.bisect: find what makes a compiled model wrong, and write a reproducer.

    from updraft.debug import bisect
    result = bisect(model, x, out_dir="bisect_out")   # prints the culprit; result.culprit, .trials

When the compiled model's output differs from eager PyTorch beyond tolerance (or the compiled
call raises; trials run with fallback=False so engine errors surface), it searches in two stages,
each trial a fresh compile (cache off, torch._dynamo.reset() first):

1. passes: the smallest set of engine pipeline passes (updraft._C.pass_names()) whose
   CompilerConfig.disable_passes makes the output right: bisection over the pass list, then
   minimisation (no pass of the set can be dropped);
2. nodes, when no pass set explains it: the smallest set of aten graph (FX) nodes whose
   CompilerConfig.eager_nodes makes it right: bisection over the engine partitions' nodes in
   graph order, then minimisation.

It prints the culprit (pass name, or node names with their aten op and source line) and writes
a standalone reproducer to out_dir: the engine text IR of the partition that holds the culprit
as lowered (before the passes; large constants as extern refs in constants.pt), that partition's
inputs (inputs.pt) and PyTorch's outputs for them (expected.pt), the engine options
(options.json), and repro.py, which parses, compiles and runs it with updraft._C alone, prints
the worst element and exits 1 while the bug is there, 0 once fixed.

What it does not do: look inside a partition below node granularity, bisect training graphs
(it runs under torch.no_grad()), or shrink the model itself.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Optional

import torch

from ._common import flatten_outputs, source_line

# Default tolerances per output dtype: (rtol, atol).
DEFAULT_TOLERANCES = {
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


@dataclasses.dataclass
class BisectResult:
    """What bisect found. kind: "none" (no difference), "pass", "nodes", or "unexplained"."""
    kind: str
    passes: list = dataclasses.field(default_factory=list)  # the pass set to disable
    nodes: list = dataclasses.field(default_factory=list)   # [(name, aten op, source line)]
    detail: str = ""          # the baseline mismatch (worst element) or error
    trials: int = 0
    seconds: float = 0.0
    repro_dir: Optional[str] = None
    log: list = dataclasses.field(default_factory=list)     # the lines printed

    @property
    def culprit(self) -> Optional[str]:
        if self.kind == "pass":
            return ", ".join(self.passes)
        if self.kind == "nodes":
            return ", ".join(n for n, _, _ in self.nodes)
        return None

    def __str__(self) -> str:
        return "\n".join(self.log)



def compare_outputs(got: list, want: list, tolerances: dict) -> Optional[str]:
    """None when every tensor of `got` matches `want` within its dtype's tolerance; otherwise the
    worst element as text."""
    if len(got) != len(want):
        return f"{len(got)} output tensors, eager gives {len(want)}"
    worst = None
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {k}: {g.dtype}{list(g.shape)} where eager gives {w.dtype}{list(w.shape)}"
        if not (g.is_floating_point() or g.is_complex()):
            bad = (g != w)
            if bad.any():
                i = int(bad.flatten().nonzero()[0])
                return f"output {k} element {i}: {g.flatten()[i].item()} where eager gives {w.flatten()[i].item()}"
            continue
        rtol, atol = tolerances.get(g.dtype, (1e-4, 1e-4))
        gd, wd = g.double(), w.double()
        err = (gd - wd).abs()
        allowed = atol + rtol * wd.abs()
        nan_mismatch = gd.isnan() != wd.isnan()
        excess = torch.where(nan_mismatch, torch.full_like(err, float("inf")), err - allowed)
        excess = torch.nan_to_num(excess, nan=-1.0)
        if excess.numel() and excess.max() > 0:
            i = int(excess.flatten().argmax())
            e = err.flatten()[i].item()
            text = (f"output {k} element {i}: {gd.flatten()[i].item():.6g} where eager gives "
                    f"{wd.flatten()[i].item():.6g} (abs error {e:.3g}; rtol {rtol:g}, atol {atol:g})")
            if worst is None or e > worst[0]:
                worst = (e, text)
    return None if worst is None else worst[1]


class _Partition:
    """An engine partition seen during a trial: its FX subgraph, its lowered engine graph as
    text with constants, and the arguments of its first call."""

    def __init__(self, part: Any, graph: Any, args: tuple) -> None:
        self.part = part
        self.name = part.report.name
        self.sub = part.sub
        self.nodes = [n for n in part.sub.graph.nodes if n.op == "call_function"]
        self.text, raw = graph.text_with_constants(64, origins=True)
        from ..lowering import TORCH_DTYPES

        self.constants = {ref: torch.frombuffer(bytearray(data), dtype=TORCH_DTYPES[dt]).reshape(shape).clone()
                          if len(data) else torch.empty(shape, dtype=TORCH_DTYPES[dt])
                          for ref, (dt, shape, data) in raw.items()}
        # The engine graph's inputs: the runtime tensors, in placeholder order (as EnginePartition
        # binds them); constants are in the text.
        self.args = tuple(a.clone() if isinstance(a, torch.Tensor) and not k else a
                          for a, k in zip(args, part.const_mask))
        self.inputs = [a for a, k in zip(self.args, part.const_mask) if isinstance(a, torch.Tensor) and not k]

    def expected(self) -> list:
        with torch.no_grad():
            return flatten_outputs(self.sub(*self.args))


def _engine_run(text: str, constants: dict, inputs: list, options: dict) -> list:
    """Parses, compiles and runs an engine graph (what repro.py does)."""
    from .. import _C
    from ..lowering import TORCH_DTYPES

    cg = _C.compile(_C.parse_graph(text, constants), options)
    shapes = cg.prepare([list(t.shape) for t in inputs])
    outs = [torch.empty(s, dtype=TORCH_DTYPES[d]) for s, d in zip(shapes, cg.output_dtypes())]
    cg.run(list(inputs), outs)
    return outs


class _Bisector:
    def __init__(self, model: Any, inputs: tuple, config: Any, tolerances: dict, verbose: bool) -> None:
        from ..config import CompilerConfig

        self.model = model
        self.inputs = inputs
        base = config or CompilerConfig()
        # inference="engine": a trial is one call, which must be the engine's.
        self.base = dataclasses.replace(base, cache_dir="", fallback=False, inference="engine")
        self.tolerances = tolerances
        self.verbose = verbose
        self.trials = 0
        self.log: list = []
        with torch.no_grad():
            self.expected = [t.detach().clone() for t in flatten_outputs(model(*inputs))]

    def say(self, line: str) -> None:
        self.log.append(line)
        if self.verbose:
            print(line, flush=True)

    def trial(self, config: Any, capture: Optional[list] = None) -> Optional[str]:
        """Compiles the model fresh under `config` and runs it once: None when it matches eager,
        else what differs (or the error). `capture` collects the engine partitions built."""
        from .. import engine_partition
        from ..backend import get_backend

        self.trials += 1
        torch._dynamo.reset()
        hook_before = engine_partition.lowered_hook
        if capture is not None:
            engine_partition.lowered_hook = lambda part, g, args: capture.append(_Partition(part, g, args))
        try:
            compiled = torch.compile(self.model, backend=get_backend(config), dynamic=False)
            with torch.no_grad():
                got = flatten_outputs(compiled(*self.inputs))
        except Exception as e:  # an engine error is a failing trial, not a failure of bisect
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            return f"the compiled call raised {type(e).__name__}: {first[:300]}"
        finally:
            engine_partition.lowered_hook = hook_before
            torch._dynamo.reset()
        return compare_outputs(got, self.expected, self.tolerances)

    def minimize(self, items: list, fixes: Callable[[list], bool]) -> list:
        """A small subset of `items` (for which fixes(items) holds) that still fixes: halves while
        one half alone fixes, then drops single items while the rest still fixes (1-minimal)."""
        s = list(items)
        while len(s) > 1:
            half = len(s) // 2
            if fixes(s[:half]):
                s = s[:half]
            elif fixes(s[half:]):
                s = s[half:]
            else:
                break
        i = 0
        while len(s) > 1 and i < len(s):
            rest = s[:i] + s[i + 1:]
            if fixes(rest):
                s = rest
            else:
                i += 1
        return s



def bisect(model: Any, *inputs: Any, config: Any = None, rtol: Optional[float] = None,
           atol: Optional[float] = None, tolerances: Optional[dict] = None, out_dir: str = "updraft_bisect",
           verbose: bool = True) -> BisectResult:
    """Finds the passes (or else the aten nodes) that make updraft's output differ from eager.

    config: the CompilerConfig that shows the problem (default CompilerConfig()); the trials use
    it with cache_dir="" and fallback=False. Tolerances per output dtype: DEFAULT_TOLERANCES,
    updated by `tolerances` {dtype: (rtol, atol)}; rtol/atol, when given, replace both for every
    dtype. Writes the reproducer to out_dir when a culprit is found. Returns a BisectResult (the
    printed lines are its str)."""
    from .. import _C
    from ..lowering import op_name

    t0 = time.perf_counter()
    tols = dict(DEFAULT_TOLERANCES)
    tols.update(tolerances or {})
    if rtol is not None or atol is not None:
        tols = {dt: (rtol if rtol is not None else r, atol if atol is not None else a) for dt, (r, a) in tols.items()}
    b = _Bisector(model, inputs, config, tols, verbose)
    result = BisectResult(kind="none", log=b.log)

    def finish() -> BisectResult:
        result.trials = b.trials
        result.seconds = time.perf_counter() - t0
        b.say(f"bisect: {result.trials} trials in {result.seconds:.1f} s")
        return result

    parts: list = []
    base_error = b.trial(b.base, capture=parts)
    if base_error is None:
        b.say("bisect: no difference found: the compiled model matches eager within tolerance")
        return finish()
    result.detail = base_error
    b.say(f"bisect: compiled output differs from eager: {base_error}")

    # Stage 1: passes.
    passes = [p for p in _C.pass_names() if not _C.pass_is_mandatory(p) and p not in b.base.disable_passes]

    def passes_fix(ps: list) -> bool:
        cfg = dataclasses.replace(b.base, disable_passes=tuple(b.base.disable_passes) + tuple(ps))
        return b.trial(cfg) is None

    if passes and passes_fix(passes):
        culprit = b.minimize(passes, passes_fix)
        result.kind, result.passes = "pass", culprit
        b.say(f"bisect: culprit: pass {', '.join(culprit)} (CompilerConfig(disable_passes={tuple(culprit)!r}) "
              "makes the output match eager)")
        _write_repro(b, result, parts, out_dir, culprit_parts=None)
        return finish()
    b.say(f"bisect: no pass set explains it (all {len(passes)} optional passes off still differs); "
          "bisecting over engine nodes")

    # Stage 2: nodes. Cost rule and partition size off, so that leaving one node to PyTorch does
    # not also move its neighbours there (which would blame the wrong node).
    node_cfg = dataclasses.replace(b.base, partition_cost=False, min_partition_size=1)
    node_parts: list = []
    if b.trial(node_cfg, capture=node_parts) is None:
        node_cfg, node_parts = b.base, parts  # the bug needs the original partitioning
    by_name = {}
    for p in node_parts:
        for n in p.nodes:
            by_name.setdefault(n.name, (n, p))
    names = list(by_name)

    def nodes_fix(ns: list) -> bool:
        cfg = dataclasses.replace(node_cfg, eager_nodes=tuple(node_cfg.eager_nodes) + tuple(ns))
        return b.trial(cfg) is None

    if not names or not nodes_fix(names):
        result.kind = "unexplained"
        b.say("bisect: leaving every engine node to PyTorch does not fix it either: the difference does not "
              "come from the engine (is the model deterministic? are the tolerances right?)")
        return finish()
    culprit = b.minimize(names, nodes_fix)
    result.kind = "nodes"
    result.nodes = [(n, op_name(by_name[n][0]), source_line(by_name[n][0]) or "(no stack trace)") for n in culprit]
    b.say(f"bisect: culprit: {len(culprit)} node(s) (CompilerConfig(eager_nodes={tuple(culprit)!r}) makes the "
          "output match eager):")
    for name, op, src in result.nodes:
        b.say(f"  {name}  {op}  {by_name[name][1].name}\n      {src}")
    holders = []
    for n in culprit:
        if by_name[n][1] not in holders:
            holders.append(by_name[n][1])
    _write_repro(b, result, node_parts, out_dir, culprit_parts=holders)
    return finish()


def _write_repro(b: _Bisector, result: BisectResult, parts: list, out_dir: str,
                 culprit_parts: Optional[list]) -> None:
    """Writes the reproducer of the first partition (of culprit_parts, or of all) whose engine
    result differs from PyTorch's under the failing options."""
    options = dict(b.base.engine_options(), debug=0)
    candidates = culprit_parts if culprit_parts is not None else parts
    chosen, detail = None, None
    for p in candidates:
        want = p.expected()
        try:
            got = _engine_run(p.text, p.constants, p.inputs, options)
            detail = compare_outputs(got, want, b.tolerances)
        except Exception as e:
            detail = f"the engine raised {type(e).__name__}: {e}"
        if detail is not None:
            chosen = (p, want)
            break
    if chosen is None:
        b.say("bisect: no single partition fails on its own (the difference needs several partitions); "
              "no reproducer written")
        return
    p, want = chosen
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "graph.txt"), "w") as f:
        f.write(p.text)
    torch.save(p.constants, os.path.join(out_dir, "constants.pt"))
    torch.save(list(p.inputs), os.path.join(out_dir, "inputs.pt"))
    torch.save(want, os.path.join(out_dir, "expected.pt"))
    if result.kind == "pass":
        without = dict(options, disable_passes=list(options.get("disable_passes", [])) + list(result.passes))
        culprit = {"kind": "pass", "passes": result.passes}
    else:
        without = None  # the culprit nodes in PyTorch: expected.pt is that answer
        culprit = {"kind": "nodes", "nodes": [list(n) for n in result.nodes]}
    meta = {"partition": p.name, "options": options, "options_without_culprit": without, "culprit": culprit,
            "tolerances": {str(dt).replace("torch.", ""): list(t) for dt, t in b.tolerances.items()}}
    with open(os.path.join(out_dir, "options.json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(out_dir, "repro.py"), "w") as f:
        f.write(_REPRO)
    result.repro_dir = out_dir
    b.say(f"bisect: reproducer for partition {p.name} written to {out_dir} "
          f"(python {os.path.join(out_dir, 'repro.py')}): {detail}")


# The standalone reproducer: torch and updraft._C only. Its dtype table and `worst` restate
# lowering.TORCH_DTYPES and compare_outputs on purpose: the script must keep running against
# other updraft versions (`git bisect run python repro.py`), where those Python names may differ;
# the compiled extension's compile/parse_graph/run calls are the only interface it relies on.
_REPRO = '''"""Reproducer written by updraft.debug.bisect: one engine partition, as lowered (before the
passes), with its inputs and PyTorch's outputs for them. Exits 1 while the engine's result
differs from PyTorch's beyond tolerance, 0 once it matches.

    python repro.py             # the options that fail (options.json "options")
    python repro.py --no-fault  # the same without the test-only debug fault switch
"""
import json
import os
import sys

import torch
from updraft import _C

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
          "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8,
          "bool": torch.bool}


def run(text, constants, inputs, options):
    cg = _C.compile(_C.parse_graph(text, constants), options)
    shapes = cg.prepare([list(t.shape) for t in inputs])
    outs = [torch.empty(s, dtype=DTYPES[d]) for s, d in zip(shapes, cg.output_dtypes())]
    cg.run(list(inputs), outs)
    return outs


def worst(got, want, tolerances):
    """(excess over tolerance, text) of the worst element; excess <= 0: within tolerance."""
    bad = (float("-inf"), "all outputs within tolerance")
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return (float("inf"), f"output {k}: shape {list(g.shape)} where PyTorch gives {list(w.shape)}")
        rtol, atol = tolerances.get(str(g.dtype).replace("torch.", ""), (1e-4, 1e-4))
        gd, wd = g.double().flatten(), w.double().flatten()
        if gd.numel() == 0:
            continue
        err = (gd - wd).abs()
        excess = torch.nan_to_num(err - (atol + rtol * wd.abs()), nan=float("inf"))
        i = int(excess.argmax())
        if excess[i].item() > bad[0]:
            bad = (excess[i].item(), f"output {k} element {i}: engine {gd[i].item():.6g}, PyTorch "
                                     f"{wd[i].item():.6g}, abs error {err[i].item():.3g} "
                                     f"(rtol {rtol:g}, atol {atol:g})")
    return bad


def main():
    meta = json.load(open(os.path.join(HERE, "options.json")))
    text = open(os.path.join(HERE, "graph.txt")).read()
    constants = torch.load(os.path.join(HERE, "constants.pt"))
    inputs = torch.load(os.path.join(HERE, "inputs.pt"))
    expected = torch.load(os.path.join(HERE, "expected.pt"))
    options = dict(meta["options"])
    if "--no-fault" in sys.argv[1:]:
        options.pop("fault_pass", None)
        options.pop("fault_op", None)
    print(f"partition {meta['partition']}; culprit: {meta['culprit']}")
    culprit = meta["culprit"]
    if culprit["kind"] == "nodes":  # the engine nodes lowered from them ("// from:" comments)
        names = {n[0] for n in culprit["nodes"]}
        for line in text.splitlines():
            if "// from:" in line and names & {s.strip() for s in line.split("// from:")[1].split(",")}:
                print(f"  culprit IR: {line.strip()}")
    try:
        got = run(text, constants, inputs, options)
    except Exception as e:  # the engine's own error is the bug being reproduced
        print(f"FAIL: the engine raised {type(e).__name__}: {e}")
        return 1
    excess, where = worst(got, expected, meta["tolerances"])
    print(f"engine vs PyTorch: {where} ({'BEYOND' if excess > 0 else 'within'} tolerance)")
    without = meta.get("options_without_culprit")
    if without:
        if "--no-fault" in sys.argv[1:]:
            without.pop("fault_pass", None)
            without.pop("fault_op", None)
        e, w = worst(run(text, constants, inputs, without), expected, meta["tolerances"])
        print(f"without the culprit (disable_passes={without['disable_passes']}): {w} "
              f"({'BEYOND' if e > 0 else 'within'} tolerance)")
    if excess > 0:
        print("FAIL: the engine's result differs from PyTorch's")
        return 1
    print("OK: the engine matches PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
