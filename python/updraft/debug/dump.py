"""Graph dumps: with `CompilerConfig(dump_dir=...)` (or UPDRAFT_DUMP_DIR) the backend writes down
what it saw and what it did, per compiled graph, in files a user can read and tools can load.

    dump_dir/
      000_forward/                  one folder per graph Dynamo handed the backend, numbered
        README.txt                  in compile order (the next free number: never another
        dynamo_graph.py             process's folder); README.txt says what each file is
        inference/                  one folder per aten graph AOTAutograd made of it
          aten_graph.py
          partitioning.txt / .dot / .svg
          partitioned_graph.py
          updraft_partition_0/
            aten_graph.py, ir_00_lowered.txt, ir_01_canonicalize.txt, ..., passes.txt,
            constants.pt, graph.dot, graph.svg, plan_<input shapes>.txt

The backend calls in at four places (backend.py: a Dynamo graph, an aten graph, its partitioning;
engine_partition.py: a partition built or failed, a new plan); everything else is here. The IR
files are the engine's pass log, printed by the pipeline itself when the compile options ask for
it (`record_ir`, src/passes/options.h): this module does not print or re-run passes, and it reads
the partitioning from the GraphReport that `explain` prints, without asking the support rules
again. `load_ir(path)` parses a dumped IR file back into an engine Graph.

Writing a dump never breaks a compile: the first error (a full disk, a read-only folder) is one
warning and that graph's dump stops there.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import threading
import zlib
from typing import Any, Callable, Optional

import torch
from torch import fx

__all__ = ["GraphDump", "AotDump", "PartitionDump", "load_ir"]

CONSTANTS_FILE = "constants.pt"
_DOT_TIMEOUT_S = 120
_number_lock = threading.Lock()


def load_ir(path: str | os.PathLike) -> Any:
    """Parses a dumped IR file (`ir_NN_<pass>.txt`) back into an engine Graph (`updraft._C.Graph`:
    `.text()` prints it, `updraft._C.compile(graph, options)` compiles it). Constants printed as
    `extern(REF)` are read from constants.pt in the same folder (a dict REF -> tensor, loaded with
    torch.load(weights_only=True)). Raises updraft._C.UpdraftError("[parse] line L, col C: ...")
    on text that does not parse, FileNotFoundError when the text names extern data and
    constants.pt is missing."""
    from .. import _C

    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    externs = None
    if "extern(" in text:
        file = os.path.join(os.path.dirname(path) or ".", CONSTANTS_FILE)
        externs = torch.load(file, weights_only=True, mmap=True)
    return _C.parse_graph(text, externs)


def _guarded(method: Callable) -> Callable:
    """A dump step that cannot fail the compile: its first error is one warning, and the rest of
    this graph's dump is skipped (a full disk would fail every later write too)."""
    @functools.wraps(method)
    def run(self, *args: Any, **kwargs: Any) -> Any:
        root = self.root
        if root.broken:
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as e:  # I/O, an unexpected graph, a missing tool: the compile goes on
            root.broken = True
            from ..report import warn_once

            warn_once(f"[updraft.dump] writing the dump in {root.dir} failed ({type(e).__name__}: {e}); "
                      "the compile goes on without the rest of this graph's dump. Check that "
                      "CompilerConfig.dump_dir (UPDRAFT_DUMP_DIR) is a writable folder with space left.")
            return None
    return run


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _safe_name(name: str, most: int = 40) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "graph"
    return name[:most]


def _graph_name() -> str:
    """The Python function Dynamo traced for this graph: its name, or, when that is a decorator's
    wrapper, the outermost `forward` it inlined (BertModel.forward rather than transformers'
    `wrapper`): Dynamo lists the frame's code first, then inlined code as each call returns."""
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    codes = list(getattr(tc, "traced_code", None) or []) if tc is not None else []
    if not codes:
        return "graph"
    if codes[0].co_name != "forward":
        codes = [c for c in codes if c.co_name == "forward"][-1:] or codes
    return _safe_name(getattr(codes[0], "co_qualname", codes[0].co_name))


def _compile_id() -> str:
    from torch._guards import CompileContext

    cid = CompileContext.current_compile_id()
    return str(cid) if cid is not None else "none (called outside torch.compile)"


def _take_folder(parent: str, name: str) -> str:
    """parent/NNN_name with NNN one past the highest number there: compile order within a
    process, and mkdir's atomicity keeps processes sharing the folder off each other's."""
    os.makedirs(parent, exist_ok=True)
    with _number_lock:
        taken = [int(m.group(1)) for e in os.listdir(parent) if (m := re.match(r"(\d+)_", e))]
        n = max(taken, default=-1) + 1
        while True:
            path = os.path.join(parent, f"{n:03d}_{name}")
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                n += 1


def _readable(gm: fx.GraphModule) -> str:
    """The graph as Python, with shapes and the FX stack traces ("# File: ..." lines)."""
    return gm.print_readable(print_output=False)


# -- pictures ---------------------------------------------------------------------------------

# Fill colours by what a node does (engine op classes, src/ir/op_table.h; the same names key the
# aten ops of the partitioning picture through _aten_class).
_CLASS_COLOURS = {
    "matmul": "#f4a261",     # conv2d, linear, matmul, grouped_mm
    "attention": "#e76f51",  # sdpa
    "elementwise": "#8ecae6",  # elementwise ops and fused elementwise chains
    "norm": "#b5e48c",       # layer/rms/batch norm, softmax
    "reduction": "#ffd166",  # reductions and pooling
    "data movement": "#cdb4db",  # permute, slice, concat, reshape, embedding, ...
    "other": "#ffffff",
}
_CLASS_LEGEND = {"matmul": "conv / linear / matmul", "attention": "attention (sdpa)",
                 "elementwise": "elementwise / fused", "norm": "norm / softmax",
                 "reduction": "reduction / pooling", "data movement": "data movement / view"}
_PARTITION_COLOURS = ["#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#e0e7ff", "#ccfbf1"]
_FALLBACK_STYLE = 'style="dashed,filled", fillcolor="#e5e5e5", color="#7a7a7a", fontcolor="#505050"'


@functools.lru_cache(maxsize=1)
def _engine_classes() -> dict:
    from .. import _C

    return {o["name"]: o["class"] for o in _C.op_info()}


def _engine_class(op: str) -> str:
    if op == "sdpa":
        return "attention"
    cls = _engine_classes().get(op, "")
    if cls == "Compute":
        return "reduction" if "pool" in op else "matmul"
    return {"Elementwise": "elementwise", "Fused": "elementwise", "Norm": "norm", "Reduction": "reduction",
            "View": "data movement", "DataMovement": "data movement"}.get(cls, "other")


_ATEN_MATMUL = ("conv", "mm", "addmm", "bmm", "linear", "matmul", "baddbmm")
_ATEN_NORM = ("norm", "softmax")
_ATEN_REDUCTION = ("sum", "mean", "amax", "amin", "max", "min", "prod", "var", "argmax", "argmin", "pool",
                   "cumsum", "sort", "topk")


def _aten_class(op: str) -> str:
    """An aten op name ("aten.addmm.default") -> the colour class of the engine op it becomes."""
    if op.startswith("operator."):
        return "data movement"  # getitem: picks one output of a multi-output node
    base = op.split(".")[1] if op.startswith("aten.") else op
    if "attention" in base:
        return "attention"
    if any(k in base for k in _ATEN_NORM):
        return "norm"
    if base.lstrip("_").startswith(_ATEN_MATMUL) or "convolution" in base:
        return "matmul"
    if any(base.lstrip("_").startswith(k) for k in _ATEN_REDUCTION):
        return "reduction"
    engine = base.lstrip("_")
    if engine in _engine_classes():
        return _engine_class(engine)
    if base in ("view", "_unsafe_view", "reshape", "permute", "t", "transpose", "expand", "slice", "cat",
                "select", "unsqueeze", "squeeze", "clone", "embedding", "index_select", "gather", "split",
                "split_with_sizes", "getitem", "alias", "_to_copy", "constant_pad_nd"):
        return "data movement"
    return "elementwise" if base else "other"


def _q(text: str) -> str:
    """A Graphviz double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _legend() -> list[str]:
    rows = "".join(f'<TR><TD BGCOLOR="{_CLASS_COLOURS[k]}">{label}</TD></TR>' for k, label in _CLASS_LEGEND.items())
    return [f'  legend [shape=plaintext, label=<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0">'
            f"<TR><TD><B>op class</B></TD></TR>{rows}</TABLE>>];"]


def engine_graph_dot(outline: dict, title: str) -> str:
    """Graphviz of an engine graph (`Executable.outline()`): a box per node, filled by op class,
    with its output types and the aten node(s) it computes; graph inputs as ellipses; constants
    listed in the node that reads them rather than drawn."""
    lines = [f"digraph {_q(title)} {{", "  rankdir=TB;", f"  label={_q(title)}; labelloc=t; fontname=Helvetica;",
             '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
             "  edge [color=\"#555555\", arrowsize=0.6];"]
    consts = outline["constants"]
    producer = {}  # value id -> dot node id
    for v in outline["inputs"]:
        lines.append(f"  {_q('in:' + v['name'])} [shape=ellipse, fillcolor=white, "
                     f"label={_q(v['name'] + chr(10) + v['type'])}];")
        producer[v["id"]] = "in:" + v["name"]
    for n in outline["nodes"]:
        nid = f"n{n['index']}"
        label = [n["op"]] + n["types"]
        read = [f"%{consts[i]['name']} {consts[i]['type']}" for i in n["inputs"] if i in consts]
        label += read[:3] + ([f"+{len(read) - 3} constants"] if len(read) > 3 else [])
        if n["origin"]:
            shown = ", ".join(n["origin"][:4]) + (f" +{len(n['origin']) - 4}" if len(n["origin"]) > 4 else "")
            label.append("from: " + shown)
        colour = _CLASS_COLOURS[_engine_class(n["op"])]
        lines.append(f"  {nid} [fillcolor={_q(colour)}, label={_q(chr(10).join(label))}];")
        for i in n["inputs"]:
            if i in producer:
                lines.append(f"  {_q(producer[i])} -> {nid};")
        for o in n["outputs"]:
            producer[o] = nid
    lines.append('  "out" [shape=ellipse, fillcolor=white, label="outputs"];')
    for o in outline["outputs"]:
        if o in producer:
            lines.append(f"  {_q(producer[o])} -> \"out\";")
    lines += _legend() + ["}"]
    return "\n".join(lines) + "\n"


def _render(dot_path: str) -> Optional[str]:
    """dot_path -> the .svg beside it with Graphviz's `dot`. None when done, else why not."""
    exe = shutil.which("dot")
    if exe is None:
        return ("the Graphviz `dot` program is not installed (Debian: apt-get install graphviz), so only "
                ".dot files were written; render one with `dot -Tsvg graph.dot -o graph.svg`")
    svg = dot_path[:-4] + ".svg"
    try:
        r = subprocess.run([exe, "-Tsvg", dot_path, "-o", svg], capture_output=True, text=True,
                           timeout=_DOT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"`dot` took over {_DOT_TIMEOUT_S} s on {os.path.basename(dot_path)}; no .svg for it"
    if r.returncode != 0:
        return f"`dot` failed on {os.path.basename(dot_path)}: {r.stderr.strip()[:300]}"
    return None


# -- the dump objects -------------------------------------------------------------------------

class GraphDump:
    """The folder of one graph Dynamo handed the backend."""

    def __init__(self, path: str, compile_id: str) -> None:
        self.dir = path
        self.root = self
        self.broken = False
        self.compile_id = compile_id
        self.notes: list[str] = []
        self._kinds: dict = {}
        self._lock = threading.Lock()

    @staticmethod
    def start(config: Any, gm: fx.GraphModule) -> Optional["GraphDump"]:
        """A new numbered folder under config.dump_dir with the Dynamo graph and README.txt; None
        when dumps are off or the folder cannot be made (one warning)."""
        if not config.dump_dir:
            return None
        try:
            d = GraphDump(_take_folder(os.path.expanduser(config.dump_dir), _graph_name()), _compile_id())
        except Exception as e:
            from ..report import warn_once

            warn_once(f"[updraft.dump] cannot make a dump folder in {config.dump_dir!r} ({type(e).__name__}: {e}); "
                      "compiling without dumps. Set CompilerConfig.dump_dir (UPDRAFT_DUMP_DIR) to a writable folder.")
            return None
        d._write_start(gm)
        return d

    @_guarded
    def _write_start(self, gm: fx.GraphModule) -> None:
        _write(os.path.join(self.dir, "dynamo_graph.py"), _readable(gm))
        self._readme()

    def note(self, text: str) -> None:
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)
        self._readme()

    @_guarded
    def _readme(self) -> None:
        _write(os.path.join(self.dir, "README.txt"), _README.format(
            folder=os.path.basename(self.dir), compile_id=self.compile_id, pid=os.getpid(),
            notes="".join(f"- {n}\n" for n in self.notes) or "- none\n"))

    @_guarded
    def aot_graph(self, kind: str, gm: fx.GraphModule) -> Optional["AotDump"]:
        """The folder of one aten graph AOTAutograd made (kind: inference, training forward or
        backward), with the graph as Python; call before partitioning (which rewrites gm)."""
        base = kind.replace(" ", "_")
        with self._lock:
            n = self._kinds.get(base, 0)
            self._kinds[base] = n + 1
        path = os.path.join(self.dir, base if n == 0 else f"{base}_{n}")
        os.makedirs(path, exist_ok=True)
        _write(os.path.join(path, "aten_graph.py"), _readable(gm))
        return AotDump(self, path, gm)


class AotDump:
    """The folder of one aten graph: its partitioning and its engine partitions."""

    def __init__(self, root: GraphDump, path: str, gm: fx.GraphModule) -> None:
        self.root = root
        self.dir = path
        self.name = os.path.relpath(path, os.path.dirname(root.dir))
        # The graph before partitioning rewrites it: (name, op, inputs, type) per node.
        self.nodes = []
        from ..lowering import op_name

        for n in gm.graph.nodes:
            ins = [a.name for a in n.all_input_nodes]
            self.nodes.append((n.name, n.op, op_name(n) if n.op == "call_function" else str(n.target), ins,
                               _type_text(n.meta.get("val"))))
        self.placement: dict = {}  # node name -> partition name (engine) or "PyTorch" / "Python"

    @_guarded
    def finish(self, compiled: Any, report: Any) -> None:
        """After the backend compiled the graph (`compiled`: a PartitionedGraph, or a boxed
        forward when all of it runs in PyTorch): the partitioning and a folder per engine
        partition, which the partition fills when it is built."""
        from ..lowering import is_shape_arithmetic

        compiled = getattr(compiled, "__wrapped__", compiled)  # training graphs: backend._boxed_function
        parts = list(getattr(compiled, "parts", None) or [])
        outer = getattr(compiled, "gm", None)
        engine = {}
        for p in parts:
            for n in p.sub.graph.nodes:
                if n.op == "call_function":
                    engine[n.name] = p.report.name
        shape_nodes = set()
        if outer is not None:
            shape_nodes = {n.name for n in outer.graph.nodes if is_shape_arithmetic(n)}
        rows = []
        for name, op, target, _, ty in self.nodes:
            if op != "call_function":
                continue
            if name in engine:
                where, why = engine[name], ""
            elif report.note:
                where, why = "PyTorch", report.note
            elif name in report.node_reasons:
                where, why = "PyTorch", report.node_reasons[name]
            elif name in shape_nodes:
                where, why = "Python", "size arithmetic on SymInts (runs beside the engine; not an op)"
            else:
                where, why = "PyTorch", "a view whose users all run in PyTorch, where it is free"
            self.placement[name] = where
            rows.append((name, target, ty, where, why))
        head = [f"# Partitioning of {self.name}: every aten node (aten_graph.py), where it runs and why.",
                f"# {len(parts)} engine partition(s); engine nodes {sum(1 for r in rows if r[3] in engine.values())}, "
                f"PyTorch nodes {sum(1 for r in rows if r[3] == 'PyTorch')}.",
                "# where: updraft_partition_N (the engine; its folder beside this file), PyTorch (eager), "
                "Python (size arithmetic)."]
        if report.note:
            head.append(f"# note: {report.note}")
        for note in report.cost_notes:
            head.append(f"# cost rule: {note}")
        for kind, reason in report.compiles:
            head.append(f"# {kind}: {reason}")
        # Columns as wide as their entries, up to a cap: one long name (sdpa's aten op) should
        # not push every row off the screen; it overflows its column instead.
        w = [min(max([len(r[i]) for r in rows] + [len(h)]), cap)
             for i, (h, cap) in enumerate((("node", 24), ("op", 32), ("type", 20), ("where", 19)))]
        lines = head + ["", f"{'node':<{w[0]}}  {'op':<{w[1]}}  {'type':<{w[2]}}  {'where':<{w[3]}}  why"]
        for r in rows:
            lines.append(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]:<{w[3]}}  {r[4]}".rstrip())
        _write(os.path.join(self.dir, "partitioning.txt"), "\n".join(lines) + "\n")
        dot = os.path.join(self.dir, "partitioning.dot")
        _write(dot, self._partition_dot([p.report.name for p in parts]))
        why_not = _render(dot)
        if why_not:
            self.root.note(why_not)
        if outer is not None and parts:
            _write(os.path.join(self.dir, "partitioned_graph.py"), _readable(outer))
        for p in parts:
            p.dump = PartitionDump(self, os.path.join(self.dir, p.report.name), p)

    def _partition_dot(self, part_names: list[str]) -> str:
        title = f"{self.name}: engine partitions (boxes) and PyTorch fallback nodes (grey, dashed)"
        colour = {name: _PARTITION_COLOURS[k % len(_PARTITION_COLOURS)] for k, name in enumerate(part_names)}
        lines = [f"digraph {_q(self.name)} {{", "  rankdir=TB;", f"  label={_q(title)}; labelloc=t; fontname=Helvetica;",
                 '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
                 "  edge [color=\"#555555\", arrowsize=0.6];"]
        members: dict = {name: [] for name in part_names}
        others = []
        for name, op, target, ins, ty in self.nodes:
            short = target.split(".")[1] if target.startswith("aten.") else target
            if op in ("placeholder", "get_attr"):
                others.append(f"  {_q(name)} [shape=plaintext, style=\"\", fontsize=8, label={_q(name + chr(10) + ty)}];")
            elif op == "output":
                others.append(f"  {_q(name)} [shape=ellipse, fillcolor=white, label=\"outputs\"];")
            else:
                where = self.placement.get(name, "PyTorch")
                label = _q(f"{short}\n{ty}\n{name}")
                if where in members:
                    fill = _CLASS_COLOURS[_aten_class(target)]
                    members[where].append(f"    {_q(name)} [fillcolor={_q(fill)}, label={label}];")
                else:
                    others.append(f"  {_q(name)} [{_FALLBACK_STYLE}, label={_q(f'{short}{chr(10)}{ty}{chr(10)}{name}{chr(10)}({where})')}];")
        for name, body in members.items():
            lines += [f"  subgraph {_q('cluster_' + name)} {{",
                      f"    label={_q(name + ' (engine)')}; style=\"rounded,filled\"; fillcolor={_q(colour[name])}; "
                      "color=\"#3b82f6\";"] + body + ["  }"]
        lines += others
        for name, op, _, ins, _ in self.nodes:
            for i in ins:
                lines.append(f"  {_q(i)} -> {_q(name)};")
        lines.append('  fallback_key [shape=box, label="PyTorch (fallback)", ' + _FALLBACK_STYLE + "];")
        return "\n".join(lines + _legend() + ["}"]) + "\n"


class PartitionDump:
    """The folder of one engine partition: its IR pass by pass, constants, plans and picture."""

    def __init__(self, aot: AotDump, path: str, part: Any) -> None:
        self.root = aot.root
        self.aot = aot
        self.dir = path
        self.name = os.path.basename(path)
        self._builds = 0
        self._lock = threading.Lock()
        os.makedirs(path, exist_ok=True)
        _write(os.path.join(path, "aten_graph.py"), _readable(part.sub))

    def _folder(self) -> str:
        """This build's folder: the partition's, or build_N inside it when its constants changed
        and it was built again."""
        if self._builds <= 1:
            return self.dir
        path = os.path.join(self.dir, f"build_{self._builds}")
        os.makedirs(path, exist_ok=True)
        return path

    @_guarded
    def built(self, cg: Any) -> None:
        """The engine compiled this partition (`cg`: its Executable, compiled with record_ir)."""
        with self._lock:
            self._builds += 1
            folder = self._folder()
        log = cg.pass_log()
        if log and log[0][0] == "cache_load":
            _write(os.path.join(folder, "graph_from_cache.txt"), cg.graph_text())
            self.root.note(f"{self.aot.name}/{self.name} was loaded from the compile cache: the passes did not "
                           "run, so there are no ir_NN files, only graph_from_cache.txt (large constants elided). "
                           "Compile with CompilerConfig(cache_dir=\"\") for the pass-by-pass IR.")
            _write(os.path.join(folder, "graph.dot"), engine_graph_dot(cg.outline(), self.name))
        else:
            rows = ["# Engine passes of " + self.name + ", in order: the IR after each is the file named.",
                    f"{'#':>2}  {'pass':<20} {'changed':<8} {'ms':>9}  file"]
            for k, (name, changed, ms, ir) in enumerate(log):
                if not ir:
                    raise RuntimeError(f"pass {name} has no IR: the partition was compiled without record_ir")
                file = "ir_00_lowered.txt" if k == 0 else f"ir_{k:02d}_{name}.txt"
                _write(os.path.join(folder, file), ir)
                rows.append(f"{k:>2}  {name:<20} {'yes' if changed else 'no':<8} {ms:>9.3f}  {file}")
            _write(os.path.join(folder, "passes.txt"), "\n".join(rows) + "\n")
            consts = cg.ir_constants()
            if consts:
                torch.save(dict(sorted(consts.items())), os.path.join(folder, CONSTANTS_FILE))
            _write(os.path.join(folder, "graph.dot"), engine_graph_dot(cg.outline(), f"{self.name} (after the passes)"))
        why_not = _render(os.path.join(folder, "graph.dot"))
        if why_not:
            self.root.note(why_not)

    @_guarded
    def failed(self, reason: str) -> None:
        _write(os.path.join(self.dir, "FAILED.txt"), f"{self.name} runs in PyTorch: {reason}\n")
        self.root.note(f"{self.aot.name}/{self.name} failed to build and runs in PyTorch: {reason} (FAILED.txt)")

    @_guarded
    def plan(self, cg: Any, signature: list) -> None:
        """A plan was built for a new input signature (tensor shapes, then size values)."""
        name = "_".join("x".join(str(d) for d in s) or "scalar" for s in signature) or "noinputs"
        if len(name) > 80:
            name = f"{name[:70]}_{zlib.crc32(name.encode()):08x}"
        with self._lock:
            folder = self._folder()
        _write(os.path.join(folder, f"plan_{name}.txt"),
               f"# memory plan and kernel schedule of {self.name} for input shapes {signature}\n"
               + cg.plan_text(signature))


def _type_text(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        from ..lowering import DTYPES

        dt = DTYPES.get(val.dtype, str(val.dtype).replace("torch.", ""))
        return f"{dt}[{', '.join(str(d) for d in val.shape)}]"
    if isinstance(val, (list, tuple)):
        return "(" + ", ".join(_type_text(v) for v in val) + ")"
    if val is None:
        return ""
    return type(val).__name__ if not isinstance(val, (int, float, torch.SymInt)) else str(val)


_README = """\
updraft graph dump: {folder}
Dynamo compile id {compile_id}, process {pid}. Written because CompilerConfig.dump_dir (or the
environment variable UPDRAFT_DUMP_DIR) was set; docs/debugging.md explains how to read it.

dynamo_graph.py
    The graph Dynamo handed the backend, as Python (torch functions and module calls), with the
    source line of each node ("# File: ...") where Dynamo recorded one.
inference/  (training_forward/, training_backward/ for a graph that needs gradients)
    One folder per aten graph AOTAutograd made of it:
    aten_graph.py         the aten graph the backend partitions (core aten ops plus the ops the
                          engine runs whole), as Python with FX stack traces.
    partitioning.txt      every aten node: its op, output type, where it runs (an engine
                          partition updraft_partition_N, PyTorch, or Python for size arithmetic)
                          and why it is not in the engine (the reasons `updraft.explain` prints).
    partitioning.dot/.svg the same as a picture: one box per engine partition, PyTorch
                          (fallback) nodes grey and dashed, engine nodes coloured by op class.
    partitioned_graph.py  the graph after partitioning: PyTorch ops and calls to the partitions.
    updraft_partition_N/  one engine partition, written when it is built (at its first call):
        aten_graph.py         the aten nodes it lowers.
        ir_00_lowered.txt     the engine IR as lowered from them (text IR, src/ir/text.h).
        ir_NN_<pass>.txt      the IR after each pass of the pipeline, in order; the last one is
                              the graph the engine runs. Each parses back:
                              updraft.debug.load_ir("ir_05_cse.txt") -> an engine Graph.
        passes.txt            the passes in order: changed or not, milliseconds, file.
        constants.pt          constants too large to print in the IR (written extern(cHASH) there):
                              torch.load(path, weights_only=True) -> {{"cHASH": tensor}}.
        graph.dot/.svg        the final engine graph: nodes coloured by op class (legend), with
                              their output types, constant inputs and the aten nodes they compute.
        plan_<shapes>.txt     the memory plan and kernel schedule for one input-shape signature
                              (one file per signature, written when its plan is built).
        build_N/              the same files for a rebuild (parameters changed between calls).
        FAILED.txt            when it failed to build, why (it then runs in PyTorch).

Notes:
{notes}"""
