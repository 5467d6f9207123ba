"""Tensor dumps and accuracy comparison: what every engine node computed, and where updraft's
numbers part from PyTorch's (docs/debugging.md, "Tensor dumps" and "Accuracy compare").

    updraft.debug.dump_tensors(model, x, out_dir="dump")  # every engine node's output: .npy + manifest.json
    res = updraft.debug.compare(model, x)                  # prints a table per engine node
    res.first_divergent                                    # the first node whose error stands out, or None

Both take a plain nn.Module (compiled here with backend updraft and the compile cache off) or a
model already torch.compile'd with updraft (run as it is), and run one call under
torch.no_grad() after a warm-up call (the warm-up compiles and builds the engine graphs).

How the engine's values are caught: during the call a forward hook on every engine partition
(the registry updraft.profiler keeps) records the partition's inputs; each partition's compiled
Executable is then run once more on them through `_C.debug_outputs`, a second Executable over a
copy of the same optimised graph whose outputs are every node output (src/runtime/
debug_outputs.h): the same planner and kernels, every intermediate in a buffer of ours, values
the engine keeps channel-blocked reordered to plain NCHW.

How compare gets PyTorch's values for the same nodes: each partition's FX subgraph
(EnginePartition.sub, the aten graph it lowered) runs in an fx.Interpreter that records every
node's output, once at fp32 on the partition's inputs (eager as the user runs it) and once with
every floating input, parameter and dtype argument cast to float64 (the reference). An engine
value is matched to the FX node whose output it equals by provenance (Value::origin, the
"output_origin" of `Executable.nodes()`); an engine value with no such twin (a piece of a
decomposition, a layout copy) is listed without errors.

Both runs of a partition start from the same inputs, those updraft gave it, so each row measures
the error the partition's nodes add up to that point, not the drift of earlier partitions; the
model's final outputs are compared against a float64 copy of the whole model as well.

What it does not do: compare values of partitions that run in PyTorch (they are PyTorch), or
anything in training mode (one call under no_grad).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import operator
import os
import sys
from typing import Any, Optional

import torch
from torch import fx

from ._common import flatten_outputs, source_line

# Flag a node when updraft's error against the fp64 reference exceeds `factor` times eager's and
# is also above `floor` relative to the value's largest magnitude. decisions.md ("compare:
# factor and floor") says why these values.
DEFAULT_FACTOR = 10.0
DEFAULT_FLOOR = 1e-5

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _c():
    from .. import _C
    return _C


# ---------------------------------------------------------------------------------------------
# Running the model once with the engine partitions' inputs recorded


def _as_compiled(model: Any) -> tuple[Any, Any]:
    """(the callable updraft runs, the eager callable it came from)."""
    orig = getattr(model, "_orig_mod", None)  # torch.compile'd nn.Module (OptimizedModule)
    if orig is not None:
        return model, orig
    orig = getattr(model, "_torchdynamo_orig_callable", None)  # torch.compile'd function
    if orig is not None:
        return model, orig
    if not callable(model):
        raise TypeError(f"[updraft.debug] expected an nn.Module or a callable, got {type(model).__name__}")
    from .. import get_backend
    from ..config import CompilerConfig

    # Cache off: provenance (which FX node each engine value is) is not stored in cache entries.
    return torch.compile(model, backend=get_backend(CompilerConfig(cache_dir=""))), model


@dataclasses.dataclass
class _Call:
    index: int  # order of the engine partition calls in the model call
    partition: Any  # EnginePartition
    args: tuple  # its inputs (tensors cloned)


def _snapshot(x: Any) -> Any:
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def _run_recorded(compiled: Any, inputs: tuple) -> tuple[Any, list[_Call]]:
    from .. import profiler
    from ..training import engine_only

    calls: list[_Call] = []

    def hook(module: Any, args: tuple, output: Any) -> None:
        # Activations are copied (an in-place op later in the call could change them); frozen
        # parameters are not (nothing writes them during a call, and they are most of the bytes).
        kinds = module.const_kinds
        calls.append(_Call(len(calls), module, tuple(a if j < len(kinds) and kinds[j] else _snapshot(a)
                                                     for j, a in enumerate(args))))

    with torch.no_grad(), engine_only():  # the engine's side, whatever CompilerConfig.inference chose
        compiled(*inputs)  # compiles (first time) and builds every partition's engine graph
        handles = [p.register_forward_hook(hook) for p in list(profiler._partitions)]
        try:
            out = compiled(*inputs)
        finally:
            for h in handles:
                h.remove()
    if not calls:
        raise RuntimeError("[updraft.debug] no engine partition ran: is the model compiled with backend "
                           "'updraft', and did the engine take any of its graph? (see updraft.explain)")
    return out, calls


# ---------------------------------------------------------------------------------------------
# Engine values of one partition call


@dataclasses.dataclass
class _Captured:
    node: int  # IR node index (graph order)
    output: int  # which output of the node
    value: int  # engine value id
    tensor: torch.Tensor  # plain layout
    info: dict  # the node's entry of Executable.nodes()
    origin: str  # the FX node whose output this value equals ("" when none)
    block: int


def _capture(call: _Call) -> tuple[Optional[list[_Captured]], str]:
    """Every node output of this partition call's engine graph, or (None, why not)."""
    from ..engine_partition import in_memory_order
    from ..lowering import TORCH_DTYPES

    st = call.partition._state
    cg = getattr(st, "cg", None)
    if cg is None:
        return None, f"runs in PyTorch ({st})" if isinstance(st, str) else "not built"
    exe, nout, captured = _c().debug_outputs(cg)
    args = call.args
    ins = [in_memory_order(args[j], o).contiguous() for j, o in zip(st.runtime_pos, st.orders)]
    sizes = [int(args[j]) for j in st.size_pos]
    sig = [list(t.shape) for t in ins] + [[v] for v in sizes]  # the engine's input signature
    ins += [torch.tensor(v, dtype=torch.int64) for v in sizes]
    shapes = exe.prepare(sig)
    outs = [torch.empty(tuple(s), dtype=TORCH_DTYPES[d]) for s, d in zip(shapes, exe.output_dtypes())]
    exe.run(ins, outs)
    nodes = cg.nodes()
    got = []
    for k, c in enumerate(captured):
        info = nodes[c["node"]]
        origins = info.get("output_origin") or []
        origin = origins[c["output"]] if c["output"] < len(origins) else ""
        if not origin and c["block"] and info.get("origin"):
            # A channel-blocked value has no origin (its bytes are not the aten tensor), but its
            # capture is reordered to plain, so it is the result of the last aten node the conv
            # computes (a fused node's output holds its chain's last result).
            origin = info["origin"][-1]
        got.append(_Captured(c["node"], c["output"], c["value"], outs[nout + k], info, origin, c["block"]))
    return got, ""


def _fx_nodes(call: _Call) -> dict:
    return {n.name: n for n in call.partition.sub.graph.nodes}


def _split_origin(origin: str) -> tuple[str, Optional[int]]:
    """'native_layer_norm[0]' -> ('native_layer_norm', 0): the lowering names element k of an FX
    node's tuple result this way; a plain name -> (name, None)."""
    if origin.endswith("]") and "[" in origin:
        base, k = origin[:-1].rsplit("[", 1)
        if k.isdigit():
            return base, int(k)
    return origin, None


def _fx_value(values: dict, origin: str) -> Any:
    """The recorded value `origin` names (a tuple element included), or None."""
    base, k = _split_origin(origin)
    v = values.get(base)
    if k is not None:
        return v[k] if isinstance(v, (tuple, list)) and k < len(v) else None
    return v


def _origin_key(n: fx.Node) -> str:
    """An FX node's name as provenance writes it: a getitem of a tuple result is 'base[k]'."""
    if n.target is operator.getitem and isinstance(n.args[0], fx.Node) and isinstance(n.args[1], int):
        return f"{n.args[0].name}[{n.args[1]}]"
    return n.name


# ---------------------------------------------------------------------------------------------
# dump_tensors


def _npy(t: torch.Tensor) -> Any:
    t = t.detach().cpu()
    if t.dtype is torch.bfloat16:  # numpy has no bfloat16: exact in float32
        t = t.float()
    return t.numpy()


def dump_tensors(model: Any, *inputs: Any, out_dir: str | os.PathLike) -> dict:
    """Runs one call of `model` (compiling it with updraft first if it is not compiled) and writes
    every engine node's output to `out_dir` as .npy, with manifest.json describing each: its
    partition, IR node index and IR line, op, dtype, shape, and the aten/FX node(s) it came from.
    Returns the manifest."""
    import numpy as np

    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    compiled, _ = _as_compiled(model)
    _, calls = _run_recorded(compiled, inputs)
    manifest: dict = {"format": 1, "partitions": [], "tensors": []}
    for call in calls:
        got, why = _capture(call)
        name = call.partition.report.name
        manifest["partitions"].append({"call": call.index, "partition": name, "status": why or "engine",
                                       "graph": call.partition._state.cg.graph_text() if got is not None else ""})
        if got is None:
            continue
        fx_nodes = _fx_nodes(call)
        for c in got:
            multi = len(c.info.get("outputs", [])) > 1
            fname = f"c{call.index:02d}_n{c.node:04d}_{c.info['op']}{f'_{c.output}' if multi else ''}.npy"
            arr = _npy(c.tensor)
            np.save(os.path.join(out_dir, fname), arr)
            origin = list(c.info.get("origin") or [])
            manifest["tensors"].append({
                "file": fname,
                "call": call.index,
                "partition": name,
                "node": c.node,
                "output": c.output,
                "value": c.value,
                "op": c.info["op"],
                "ir": c.info["text"],
                "dtype": str(c.tensor.dtype).replace("torch.", ""),
                "stored_dtype": str(arr.dtype),
                "shape": list(c.tensor.shape),
                "channel_block": c.block,  # the engine kept it blocked; stored plain NCHW
                "value_origin": c.origin,  # the FX node whose output this tensor equals
                "origin": [{"fx": o,
                            "target": str(fx_nodes[o].target) if o in fx_nodes else "",
                            "source": source_line(fx_nodes.get(o))} for o in origin],
            })
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


# ---------------------------------------------------------------------------------------------
# compare


def _cast64(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _FLOATS:
        return x.to(torch.float64)
    if isinstance(x, torch.dtype) and x in _FLOATS:
        return torch.float64
    if isinstance(x, (list, tuple)):
        return type(x)(_cast64(v) for v in x)
    if isinstance(x, dict):
        return {k: _cast64(v) for k, v in x.items()}
    return x


class _Recorder(fx.Interpreter):
    """Runs a GraphModule and keeps every node's output by name; with `to64`, floating tensors,
    attributes and dtype arguments are float64 (the reference run)."""

    def __init__(self, gm: fx.GraphModule, to64: bool) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.to64 = to64
        self.values: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n.name] = out
        return out

    def fetch_attr(self, target: str) -> Any:
        v = super().fetch_attr(target)
        return _cast64(v) if self.to64 else v

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if self.to64:
            args, kwargs = _cast64(args), _cast64(kwargs)
        return super().call_function(target, args, kwargs)


def _record_fx(call: _Call, to64: bool) -> tuple[dict, str]:
    args = _cast64(call.args) if to64 else call.args
    rec = _Recorder(call.partition.sub, to64)
    try:
        with torch.no_grad():
            rec.run(*args)
    except Exception as e:  # an op without a float64 kernel: that partition has no reference
        return rec.values, f"{type(e).__name__}: {e}"
    return rec.values, ""


def normwise_errors(x: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float]:
    """(max abs error, max abs error / max |ref|, max |ref|) over finite reference elements;
    a NaN or Inf where the reference is finite is an infinite error."""
    x = x.detach().to(torch.float64)
    ref = ref.detach().to(torch.float64)
    if x.numel() == 0:
        return 0.0, 0.0, 0.0
    finite = torch.isfinite(ref)
    diff = (x - ref).abs()
    diff = torch.where(torch.isnan(diff) & finite, math.inf, diff)  # NaN where the reference is a number
    same = (x == ref) | (torch.isnan(x) & torch.isnan(ref))  # where it is Inf or NaN: equal, or infinitely off
    diff = torch.where(finite, diff, torch.where(same, 0.0, math.inf))
    err = float(diff.max())
    scale = float(ref[finite].abs().max()) if bool(finite.any()) else 0.0
    rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
    return err, rel, scale


def _stats(t: Any) -> dict:
    if not isinstance(t, torch.Tensor):
        return {"value": repr(t)}
    s: dict = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
    if t.numel() == 0:
        return s
    f = t.detach().to(torch.float64)
    finite = f[torch.isfinite(f)]
    s.update(min=float(finite.min()) if finite.numel() else math.nan,
             max=float(finite.max()) if finite.numel() else math.nan,
             nan=int(torch.isnan(f).sum()), inf=int(torch.isinf(f).sum()))
    return s


def _fmt_stats(s: dict) -> str:
    if "value" in s:
        return s["value"]
    if "min" not in s:
        return f"{s['dtype']}{s['shape']} (empty)"
    return (f"{s['dtype']}{s['shape']} min {s['min']:.4g} max {s['max']:.4g} "
            f"NaN {s['nan']} Inf {s['inf']}")


@dataclasses.dataclass
class Comparison:
    """What compare() found. rows: one dict per engine node output (see compare());
    first_divergent: the first flagged row with its details, or None; outputs: the model's final
    outputs against the float64 model; notes: partitions or values that could not be compared."""

    rows: list[dict]
    first_divergent: Optional[dict]
    outputs: list[dict]
    factor: float
    floor: float
    notes: list[str]

    @property
    def flagged(self) -> list[dict]:
        return [r for r in self.rows if r["flagged"]]

    def __str__(self) -> str:
        def e(x: Optional[float]) -> str:
            return "-" if x is None else f"{x:.2e}"

        lines = [f"updraft.debug.compare: {len(self.rows)} engine values, {len(self.flagged)} flagged "
                 f"(updraft's error vs the fp64 reference > {self.factor:g} x eager's and > "
                 f"{self.floor:g} x max|ref|)", "",
                 "| call | node | op | shape | fx node | updraft abs | updraft rel | eager abs | eager rel | |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            mark = "DIVERGES" if r["flagged"] else (r["skipped"] or "")
            lines.append(f"| {r['call']} | {r['node']}{'.' + str(r['output']) if r['multi'] else ''} | {r['op']} | "
                         f"{'x'.join(map(str, r['shape'])) or 'scalar'} | {r['fx'] or '-'} | "
                         f"{e(r['updraft_abs'])} | {e(r['updraft_rel'])} | {e(r['eager_abs'])} | "
                         f"{e(r['eager_rel'])} | {mark} |")
        if self.outputs:
            lines += ["", "Model outputs against the float64 model:"]
            for o in self.outputs:
                lines.append(f"  output {o['index']} {o['shape']}: updraft abs {e(o['updraft_abs'])} rel "
                             f"{e(o['updraft_rel'])}, eager abs {e(o['eager_abs'])} rel {e(o['eager_rel'])}")
        for n in self.notes:
            lines.append(f"note: {n}")
        d = self.first_divergent
        if d is None:
            lines.append("No engine node diverges.")
        else:
            lines += ["", f"First divergent node: call {d['call']} ({d['partition']}) node {d['node']} {d['op']}",
                      f"  IR:     {d['ir']}",
                      f"  aten:   {', '.join(d['aten']) or '-'}",
                      f"  source: {d['source'] or '(no stack trace)'}",
                      f"  error:  updraft {d['updraft_abs']:.3g} abs ({d['updraft_rel']:.3g} rel), "
                      f"eager {d['eager_abs']:.3g} abs ({d['eager_rel']:.3g} rel)"]
            for name, s in d["inputs"]:
                lines.append(f"  input {name}: {_fmt_stats(s)}")
        return "\n".join(lines)



def compare(model: Any, *inputs: Any, factor: float = DEFAULT_FACTOR, floor: float = DEFAULT_FLOOR,
            reference_model: bool = True, file: Any = None, verbose: bool = True) -> Comparison:
    """Runs `model` in updraft, in eager PyTorch (fp32, as the user runs it) and in a float64
    reference, and prints a table per engine node output: the max abs error and the max abs
    error relative to the reference's largest magnitude, of updraft's value and of eager's, both
    against the float64 reference. A node is flagged when updraft's abs error is more than
    `factor` times eager's and its relative error is above `floor` (so values at rounding level
    are not flagged). The first flagged node is named with its IR line, the aten node(s) and
    their source line, and its inputs' statistics (min, max, NaN/Inf counts).

    `model`: an nn.Module or callable (compiled here with updraft, cache off) or a torch.compile'd
    one (its original module is the eager model). reference_model: also compare the final
    outputs against a float64 deep copy of the whole model. Prints to `file` (default stdout)
    unless verbose=False; returns a Comparison (rows, first_divergent, outputs, notes)."""
    if not factor >= 1.0:
        raise ValueError(f"[updraft.debug] compare: factor={factor!r} must be >= 1")
    if not floor >= 0.0:
        raise ValueError(f"[updraft.debug] compare: floor={floor!r} must be >= 0")
    compiled, eager = _as_compiled(model)
    notes: list[str] = []
    with torch.no_grad():
        eager_out = flatten_outputs(eager(*inputs))
    upd_out, calls = _run_recorded(compiled, inputs)
    upd_out = flatten_outputs(upd_out)

    rows: list[dict] = []
    first: Optional[dict] = None
    for call in calls:
        got, why = _capture(call)
        pname = call.partition.report.name
        if got is None:
            notes.append(f"call {call.index} ({pname}) {why}: not compared")
            continue
        if got and not any(c.info.get("origin") for c in got):
            notes.append(f"call {call.index} ({pname}): its engine graph carries no provenance (loaded from "
                         "the compile cache?); compile with CompilerConfig(cache_dir='') to compare it")
        rec32, err32 = _record_fx(call, to64=False)
        rec64, err64 = _record_fx(call, to64=True)
        for err, what in ((err32, "fp32"), (err64, "float64")):
            if err:
                notes.append(f"call {call.index} ({pname}): the {what} FX run failed ({err}); nodes after it "
                             "are not compared")
        fx_nodes = _fx_nodes(call)
        by_value = {c.value: c for c in got}
        for c in got:
            row = {"call": call.index, "partition": pname, "node": c.node, "output": c.output,
                   "multi": len(c.info.get("outputs", [])) > 1, "op": c.info["op"], "ir": c.info["text"],
                   "fx": c.origin, "aten": list(c.info.get("origin") or []), "shape": list(c.tensor.shape),
                   "dtype": str(c.tensor.dtype).replace("torch.", ""), "updraft_abs": None,
                   "updraft_rel": None, "eager_abs": None, "eager_rel": None, "ref_max": None,
                   "flagged": False, "skipped": ""}
            rows.append(row)
            ref, e32 = _fx_value(rec64, c.origin), _fx_value(rec32, c.origin)
            if not c.origin:
                row["skipped"] = "no FX twin"
                continue
            if not isinstance(ref, torch.Tensor) or not isinstance(e32, torch.Tensor):
                row["skipped"] = "no reference"
                continue
            if tuple(ref.shape) != tuple(c.tensor.shape):
                row["skipped"] = f"shape differs from {c.origin}'s {list(ref.shape)}"
                continue
            ua, ur, scale = normwise_errors(c.tensor, ref)
            ea, er, _ = normwise_errors(e32, ref)
            row.update(updraft_abs=ua, updraft_rel=ur, eager_abs=ea, eager_rel=er, ref_max=scale)
            row["flagged"] = ua > factor * ea and ur > floor
            if row["flagged"] and first is None:
                first = dict(row)
                fxn = fx_nodes.get(_split_origin(c.origin)[0])
                first["source"] = source_line(fxn) or next(
                    (s for s in (source_line(fx_nodes.get(o)) for o in row["aten"]) if s), "")
                first["aten"] = [f"{o} ({fx_nodes[o].target})" if o in fx_nodes else o for o in row["aten"]]
                first["inputs"] = _input_stats(call, c, fx_nodes, by_value, rec32)
    outputs = _output_errors(eager, inputs, eager_out, upd_out, notes) if reference_model else []
    if first is None and any(o["updraft_abs"] > factor * o["eager_abs"] and o["updraft_rel"] > floor for o in outputs):
        notes.append("the model's output diverges but no engine node does when its graph is run again here: "
                     "look at state the normal call's kernels keep (prepacked weights of a parameter "
                     "changed since), at ops that run in PyTorch, or at the graph between partitions")
    res = Comparison(rows, first, outputs, factor, floor, notes)
    if verbose:
        print(res, file=file or sys.stdout)
    return res


def _input_stats(call: _Call, c: _Captured, fx_nodes: dict, by_value: dict, rec32: dict) -> list:
    """Statistics of the diverging node's inputs as updraft had them: each engine input that a
    node of this graph made, then the inputs of the FX nodes it computes that come from outside
    them (partition inputs, parameters) and are not among the former."""
    out, covered = [], set()
    for vid in c.info.get("inputs", []):
        cap = by_value.get(vid)
        if cap is not None:
            out.append((f"%{vid} = {cap.origin or '?'} (node {cap.node} {cap.info['op']})", _stats(cap.tensor)))
            covered.add(cap.origin)
    fused = set(c.info.get("origin") or [])
    for name in c.info.get("origin") or []:
        n = fx_nodes.get(name)
        for a in (n.all_input_nodes if n is not None else []):
            key = _origin_key(a)
            if a.name in fused or key in covered or a.name in covered or (
                    a.target is operator.getitem and getattr(a.args[0], "name", "") in fused):
                continue  # computed inside the node (a tuple element of a fused op included), or shown
            covered.add(key)
            out.append((f"{a.name} ({a.op})", _stats(rec32.get(a.name))))
    return out


def _output_errors(eager: Any, inputs: tuple, eager_out: list, upd_out: list, notes: list) -> list:
    if not isinstance(eager, torch.nn.Module):
        return []
    try:
        m64 = copy.deepcopy(eager).to(torch.float64)
        with torch.no_grad():
            ref_out = flatten_outputs(m64(*_cast64(inputs)))
    except Exception as e:  # an op without a float64 kernel, a model that cannot be copied
        notes.append(f"no float64 model reference ({type(e).__name__}: {e})")
        return []
    res = []
    for i, (r, eo, uo) in enumerate(zip(ref_out, eager_out, upd_out)):
        if r.shape != uo.shape or not r.is_floating_point():
            continue
        ua, ur, _ = normwise_errors(uo, r)
        ea, er, _ = normwise_errors(eo, r)
        res.append({"index": i, "shape": list(r.shape), "updraft_abs": ua, "updraft_rel": ur,
                    "eager_abs": ea, "eager_rel": er})
    return res
