"""`updraft.export`: a model compiled once into a self-contained model file (docs/export.md).

    info = updraft.export(model, (x,), "mlp.updraft")
    info = updraft.export(bert, (ids,), "bert.updraft",
                          dynamic_shapes={"input_ids": {0: Dim("batch"), 1: Dim("seq", max=512)}})

torch.export traces the model into an aten graph, which is decomposed with the table the
backend gives AOTAutograd (backend.decompositions) and lowered by the function a partition
uses at its first call (engine_partition.lower_graph), then compiled by the same engine pass
pipeline: the file holds the graph torch.compile(backend="updraft") would run, so both give
the same bits. Parameters, buffers and lifted constants become constants stored by value;
the user inputs are the file's inputs, with torch.export's symbol ranges.

What it does not do: fall back. A file runs without PyTorch, so any op the engine cannot run
(the partitioner's own check, support.EngineSupport) fails the export with the list of them.
Nor does it load or run a file (load.py), or define the format (src/model/model_file.h).
"""
from __future__ import annotations

import collections
import dataclasses
import os
import re
import sys
import time
import types
from typing import Any, Optional

import torch

from .config import CompilerConfig

_INT64_MAX = (1 << 63) - 1


class ExportError(RuntimeError):
    """updraft.export cannot write a model file for this model; the message says why and what to do."""


@dataclasses.dataclass
class ExportInfo:
    """What updraft.export wrote."""
    path: str
    file_bytes: int
    parameter_bytes: int  # the model's parameters and buffers, as torch holds them
    export_s: float  # torch.export, decompositions, lowering, engine compile and the write
    inputs: list  # [(name, dtype, shape)] shape: ints and symbol names
    outputs: list  # [(name, dtype, shape)]
    ranges: dict  # symbol -> (min, max)
    note: str

    def __str__(self) -> str:
        ins = ", ".join(f"{n} {d}{list(s)}" for n, d, s in self.inputs)
        outs = ", ".join(f"{n} {d}{list(s)}" for n, d, s in self.outputs)
        rng = "".join(f", {k} in [{lo}, {hi}]" for k, (lo, hi) in self.ranges.items())
        return (f"{self.path}: {self.file_bytes / 1e6:.1f} MB (parameters {self.parameter_bytes / 1e6:.1f} MB), "
                f"exported in {self.export_s:.2f} s; inputs {ins}{rng}; outputs {outs}")


# Nodes of an exported graph that check at run time what the file checks otherwise: a
# tensor's dtype and device (fixed in the engine graph; the loader checks the inputs'), a
# size's range (the signature's symbol ranges, ModelSignature.check_shapes). Dropped.
_ASSERTS = tuple(getattr(torch.ops.aten, n).default for n in (
    "_assert_scalar", "sym_constrain_range", "sym_constrain_range_for_size", "_assert_tensor_metadata")
    if hasattr(torch.ops.aten, n))


def decomposition_table() -> dict:
    """The backend's table (backend.decompositions), written out for torch.export. AOTAutograd
    decomposes every CompositeImplicitAutograd op by its C++ composite whether the table names
    it or not; run_decompositions keeps the ones the table leaves out (upsample_bilinear2d.vec,
    and adaptive_avg_pool2d, which the backend takes out of the table for the engine). So those
    get their composite here, and both paths hand the lowering the same graph."""
    from torch._export.utils import _collect_all_valid_cia_ops_for_aten_namespace, _get_decomp_for_cia

    from .backend import decompositions

    table = decompositions()
    for op in _collect_all_valid_cia_ops_for_aten_namespace():
        if op not in table:
            table[op] = _get_decomp_for_cia(op)
    return table


def export(model: torch.nn.Module, example_inputs: Any, path: str | os.PathLike,
           dynamic_shapes: Any = None, config: Optional[CompilerConfig] = None) -> ExportInfo:
    """Writes `model` compiled for the engine to `path` (one self-contained file: the optimised
    graph, every weight by value, the signature with symbol ranges; docs/export.md).

    example_inputs: a tensor or a tuple of tensors (the positional arguments). dynamic_shapes:
    as torch.export.export takes it (torch.export.Dim per dynamic dim); without it every size is
    fixed to the example's. config: the CompilerConfig whose engine options (fold_constants,
    fuse, conv_layout, disable_passes...) compile the graph, as torch.compile's would.
    Raises ExportError when torch.export cannot trace the model or the engine cannot run an op
    of it (every such op is listed, with the reason). The file is written atomically: a reader
    sees the old file or the whole new one.
    """
    t0 = time.perf_counter()
    if config is None:
        config = CompilerConfig()
    if not isinstance(config, CompilerConfig):
        raise TypeError(f"[updraft.export] config must be a CompilerConfig, got {type(config).__name__}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"[updraft.export] model must be a torch.nn.Module, got {type(model).__name__}; "
                        "wrap a function in a Module whose forward calls it")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"[updraft.export] example input {i} is a {type(a).__name__}; a model file takes "
                            "tensors only (fix other arguments in a wrapper Module)")
    path = os.fspath(path)

    ep = _trace(model, args, dynamic_shapes)
    gm = ep.graph_module
    sig = ep.graph_signature
    _check_no_mutations(sig)
    _check_size_guards(ep)
    _check_supported(gm, config, _drop_asserts(ep), training=model.training)

    from . import _C
    from .engine_partition import check_out_dtypes, lower_graph
    from .lowering import Unsupported, meta

    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    values, kinds, runtime_pos = _placeholder_values(ep, placeholders)
    out_node = gm.graph.output_node()
    outputs = list(out_node.args[0])
    try:
        lw, ids, _ = lower_graph(gm.graph, values, kinds, runtime_pos, [], outputs)
        check_out_dtypes(outputs, [lw.g.value_type(i)[0] for i in ids])
    except Unsupported as e:
        raise ExportError(f"[updraft.export] the engine cannot build this model's graph: {e}; "
                          "run it with torch.compile(backend='updraft') instead, which leaves such parts to "
                          "PyTorch") from None
    if lw.opaque:
        # An input dim that is an expression (a derived Dim, 2*half) gets an engine symbol of
        # its own, which the file has no range for: it would take any value, odd ones too.
        dims = ", ".join(f"{e} (engine symbol {n})" for e, n in lw.opaque.items())
        raise ExportError(f"[updraft.export] input dims {dims} are expressions of other sizes, and a model file "
                          "checks plain sizes' ranges only; give each such dim its own torch.export.Dim")
    cg = _C.compile(lw.g, config.engine_options())

    in_syms = {d.node.expr.name for j in runtime_pos for d in meta(placeholders[j]).shape
               if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol}
    ranges = _ranges(ep, in_syms)
    names = _output_names(ep, len(outputs))
    note = _note(model, args, dynamic_shapes)
    data = _C.save_model(cg, names, ranges, note)
    _write_atomically(path, data)

    def io(vals: list, names_: list) -> list:
        return [(n, str(v.dtype).replace("torch.", ""), [d if isinstance(d, int) else str(d.node.expr) for d in v.shape])
                for n, v in zip(names_, vals)]

    user_in = [meta(placeholders[j]) for j in runtime_pos]
    return ExportInfo(
        path=path, file_bytes=len(data),
        parameter_bytes=sum(t.numel() * t.element_size() for t in
                            {id(t): t for t in list(model.parameters()) + list(model.buffers())}.values()),
        export_s=time.perf_counter() - t0,
        inputs=io(user_in, [placeholders[j].name for j in runtime_pos]),
        outputs=io([meta(o) for o in outputs], names),
        ranges={s: (lo, hi) for s, lo, hi in ranges}, note=note)


def _trace(model: torch.nn.Module, args: tuple, dynamic_shapes: Any) -> Any:
    """torch.export, then the backend's decompositions."""
    try:
        with torch.no_grad():
            ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes)
    except Exception as e:
        raise ExportError(f"[updraft.export] torch.export could not trace {type(model).__name__}: "
                          f"{type(e).__name__}: {e}") from e
    return ep.run_decompositions(decomposition_table())


def _check_no_mutations(sig: Any) -> None:
    """A model file has no state between calls: a forward that writes a buffer or an input is refused."""
    from torch.export.graph_signature import OutputKind

    # An effect token (OutputKind.TOKEN) orders an effectful op, which the op check lists.
    written = [f"{s.kind.name.lower()} {s.target or s.arg.name}" for s in sig.output_specs
               if s.kind not in (OutputKind.USER_OUTPUT, OutputKind.TOKEN)]
    if written:
        raise ExportError(f"[updraft.export] the model's forward writes state ({', '.join(written)}), which a "
                          "model file cannot keep between calls; call model.eval() (training-mode batch norm "
                          "updates its running stats) or remove the in-place update")


def _implied(cond: Any, ranges: dict) -> bool:
    """Whether a condition on sizes holds for every size in the symbols' ranges."""
    from torch.utils._sympy.value_ranges import bound_sympy

    try:
        vr = bound_sympy(cond, ranges)
        return vr.is_singleton() and bool(vr.lower)
    except Exception:  # an expression the range analysis cannot bound
        return False


def _check_size_guards(ep: Any) -> None:
    """Refuses a model that holds only for some sizes in its ranges. torch.export keeps such
    conditions (a reshape into halves: the batch must be even) beside the graph, and its own
    module checks them per call; a model file checks each symbol's range only, so a size outside
    the conditions would run, wrongly."""
    from torch.export.exported_program import _get_shape_env

    shape_env = _get_shape_env(ep.graph_module)
    if shape_env is None:
        return
    ranges = dict(ep.range_constraints)
    syms = set(ranges)
    unmet = sorted({str(g.expr) for g in shape_env.guards
                    if g.expr.free_symbols and g.expr.free_symbols <= syms and not _implied(g.expr, ranges)})
    if unmet:
        shown = "; ".join(unmet[:6]) + (f"; and {len(unmet) - 6} more" if len(unmet) > 6 else "")
        ranges_text = ", ".join(f"{k} in [{v.lower}, {v.upper if v.upper.is_Integer else 'inf'}]"
                                for k, v in sorted(ranges.items(), key=str))
        raise ExportError(f"[updraft.export] the model holds only for sizes where {shown} ({ranges_text}), and a "
                          "model file checks each size's range only; export those dims static (leave them out of "
                          "dynamic_shapes) or change the model so that every size in the range works")


def _drop_asserts(ep: Any) -> dict:
    """Erases the run-time asserts the file checks otherwise (_ASSERTS). An _assert_scalar
    whose condition the symbols' ranges do not imply (s0 % 8 == 0) stays: returns why, per node."""
    from .lowering import meta

    gm = ep.graph_module
    ranges = dict(ep.range_constraints)
    kept = {}
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _ASSERTS or n.users:
            continue
        if n.target is torch.ops.aten._assert_scalar.default:
            cond = meta(n.args[0]) if n.args else True
            if isinstance(cond, torch.SymBool):
                expr = cond.node.expr
                if not _implied(expr, ranges):
                    kept[n] = (f"checks {expr} at run time, which the symbols' ranges do not imply and a model "
                               "file cannot check; constrain the dims (torch.export.Dim min/max) or fix the size")
                    continue
        gm.graph.erase_node(n)
    return kept


def _check_supported(gm: Any, config: CompilerConfig, reasons: Optional[dict] = None, training: bool = False) -> None:
    """Every op the engine cannot run, with why, in one ExportError (the partitioner's check);
    `reasons`: nodes refused already, with why; `training`: the model was in training mode."""
    from .lowering import is_shape_arithmetic, meta, op_name
    from .support import EngineSupport

    support = EngineSupport(config)
    bad: dict = collections.defaultdict(list)
    for n in gm.graph.nodes:
        if n.op != "call_function" or is_shape_arithmetic(n):
            continue
        reason = (reasons or {}).get(n) or support.reason(n)
        if reason is not None and reason != "its producer runs in PyTorch":
            bad[op_name(n)].append((n.name, reason))
    if not bad:
        return
    lines = []
    for op, where in sorted(bad.items(), key=lambda kv: -len(kv[1])):
        why = collections.Counter(r for _, r in where)
        nodes = ", ".join(name for name, _ in where[:3]) + (", ..." if len(where) > 3 else "")
        lines.append(f"  {op} x{len(where)} ({nodes}): " + "; ".join(why))
    raise ExportError(f"[updraft.export] {sum(len(w) for w in bad.values())} node(s) of {len(bad)} op(s) cannot run "
                      "in the engine, and a model file runs without PyTorch:\n" + "\n".join(lines) +
                      ("\nthe model is in training mode (dropout...): call model.eval() first" if training else "") +
                      "\nchange the model to avoid them (or export the part before them), or run it with "
                      "torch.compile(backend='updraft'), which leaves them to PyTorch")


def _placeholder_values(ep: Any, placeholders: list) -> tuple[list, list, list]:
    """Per placeholder: its value (the real tensor of a parameter, buffer or lifted constant;
    the FakeTensor of a user input), its kind for lower_graph ("literal": stored by value; None:
    an input) and the positions of the user inputs."""
    from torch.export.graph_signature import InputKind, TensorArgument

    from .lowering import meta

    state = {**ep.state_dict, **ep.constants}
    values, kinds, runtime_pos = [], [], []
    for j, (ph, spec) in enumerate(zip(placeholders, ep.graph_signature.input_specs)):
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(spec.arg, TensorArgument):
                raise ExportError(f"[updraft.export] input {ph.name} is not a tensor ({type(spec.arg).__name__}); "
                                  "a model file takes tensors only")
            values.append(meta(ph))
            kinds.append(None)
            runtime_pos.append(j)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            t = state.get(spec.target)
            if not isinstance(t, torch.Tensor):
                raise ExportError(f"[updraft.export] {spec.kind.name.lower()} {spec.target} has no tensor value "
                                  f"in the exported program; please report this")
            values.append(t.detach())
            kinds.append("literal")  # stored by value: the file owns its weights
        else:
            raise ExportError(f"[updraft.export] input {ph.name} is a {spec.kind.name.lower()}, which a model file "
                              "cannot hold (custom objects, effect tokens)")
    return values, kinds, runtime_pos


def _ranges(ep: Any, in_syms: set) -> list:
    """(symbol, min, max) for each symbol the inputs carry, from torch.export's range
    constraints (the engine names a symbol as torch does); an open end is the int64 limit."""
    out = []
    for sym, vr in ep.range_constraints.items():
        name = getattr(sym, "name", None)
        if name not in in_syms:
            continue
        # torch's int_oo says is_finite (to keep sympy's arithmetic going): ask for an Integer.
        lo = int(vr.lower) if vr.lower.is_Integer else 0
        hi = int(vr.upper) if vr.upper.is_Integer else _INT64_MAX
        out.append((name, max(lo, 0), min(hi, _INT64_MAX)))
    return sorted(out)


def _output_names(ep: Any, n: int) -> list[str]:
    """The names the model's output structure gives its tensors (a ModelOutput's or a dict's
    keys: last_hidden_state, pooler_output; nested: past.0), else out0, out1, ..."""
    spec = ep.call_spec.out_spec
    paths: list = []

    def walk(s: Any, path: tuple) -> None:
        if s.is_leaf():
            paths.append(path)
            return
        ctx = s.context
        keys = list(ctx) if isinstance(ctx, (list, tuple)) and len(ctx) == s.num_children else range(s.num_children)
        for k, child in zip(keys, s.children()):
            walk(child, path + (k,))

    try:
        walk(spec, ())
    except Exception:  # a pytree node kind this walk does not know: plain names
        paths = []
    names = []
    for i, p in enumerate(paths):
        if any(isinstance(k, str) for k in p):
            # A model file's output names are plain file names (updraft-run writes NAME.npy):
            # ASCII letters, digits, '_', '-', '.', not first '.' (src/model/model_file.cpp).
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", ".".join(str(k) for k in p))
            names.append(name if not name.startswith(".") else "_" + name)
        else:
            names.append(f"out{i}")
    if len(names) != n or len(set(names)) != n or not all(names):
        return [f"out{i}" for i in range(n)]
    return names


def _note(model: torch.nn.Module, args: tuple, dynamic_shapes: Any) -> str:
    from . import __version__

    cls = type(model)
    shapes = ", ".join(f"{str(a.dtype).replace('torch.', '')}{list(a.shape)}" for a in args)
    return (f"model {cls.__module__}.{cls.__qualname__}; example inputs {shapes}"
            f"{'; dynamic shapes' if dynamic_shapes else ''}; torch {torch.__version__}; updraft {__version__}")


def _write_atomically(path: str, data: bytes) -> None:
    """Writes a temporary file beside `path`, then renames it over `path`: a process that maps
    the old file keeps its pages, and no reader sees half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ExportError(f"[updraft.export] cannot write {path}: {e}; check the folder exists and is writable") from e


class _CallableModule(types.ModuleType):
    """This module, callable as its function: updraft.export(...) (see updraft/__init__.py)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
