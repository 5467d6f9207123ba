"""The `updraft` command.

    updraft --version
    updraft ops                              # the ops the engine implements
    updraft explain --model mlp [--batch N]  # compile a zoo model, print what ran in the engine
    updraft run --model resnet50 [--batch N] [--iters N] [--warmup N] [--inductor]
                                             # python -m updraft.demo: check vs eager and time it
    updraft bisect --model mlp [--out DIR] [--debug-fault pass:NAME|kernel:OP] [--disable-pass NAME]
    updraft bisect --model my_pkg.models:build   # a function returning (model, inputs)
                                             # find the pass or nodes that make it differ from eager
    updraft export bert -o bert.updraft [--batch N] [--seq N] [--dynamic] [--no-check]
    updraft export my_pkg.models:build -o m.updraft
                                             # a model file (updraft.export), checked against eager
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Optional


def _cmd_ops(args: argparse.Namespace, extra: list) -> int:
    from . import _C

    names = _C.op_names()
    for name in names:
        print(name)
    print(f"{len(names)} engine ops", file=sys.stderr)
    return 0


def _check_model(name: str) -> bool:
    from . import zoo  # imports torch: only for the commands that build a model

    if name not in zoo.MODELS:
        print(f"updraft: unknown model '{name}'; choose one of {', '.join(sorted(zoo.MODELS))}",
              file=sys.stderr)
        return False
    return True


def _cmd_explain(args: argparse.Namespace, extra: list) -> int:
    import updraft

    from . import zoo

    if not _check_model(args.model):
        return 2
    model, inputs = zoo.build(args.model, batch=args.batch)
    print(f"model {args.model} batch {args.batch}")
    report = updraft.explain(model, *inputs)
    print(report)
    return 0 if report.graphs else 1


def _cmd_run(args: argparse.Namespace, extra: list) -> int:
    if not _check_model(args.model):
        return 2
    from . import demo

    return demo.main(["--model", args.model, "--batch", str(args.batch)] + extra)


def _load_model(spec: str, batch: int):
    """(model, inputs) from a zoo name or an importable "module:function" returning them."""
    if ":" in spec:
        import importlib

        module, _, fn = spec.partition(":")
        model, inputs = getattr(importlib.import_module(module), fn)()
        if hasattr(model, "eval"):
            model.eval()
        return model, tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    from . import zoo

    return zoo.build(spec, batch=batch)


def _cmd_bisect(args: argparse.Namespace, extra: list) -> int:
    from .config import CompilerConfig
    from .debug import bisect

    if ":" not in args.model and not _check_model(args.model):
        return 2
    try:
        config = CompilerConfig(debug_fault=args.debug_fault, disable_passes=tuple(args.disable_pass))
    except (TypeError, ValueError) as e:
        print(f"updraft: {e}", file=sys.stderr)
        return 2
    model, inputs = _load_model(args.model, args.batch)
    print(f"model {args.model} batch {args.batch}" + (f" debug_fault {args.debug_fault}" if args.debug_fault else ""))
    result = bisect(model, *inputs, config=config, rtol=args.rtol, atol=args.atol, out_dir=args.out)
    return 0 if result.kind == "none" else 1


def _example_inputs_for(name: str, batch: int, seq: Optional[int]) -> tuple:
    """(model, inputs) of zoo model `name` at this batch and sequence length."""
    import inspect

    from . import zoo

    kwargs = {"batch": batch}
    if seq is not None:
        if "seq" not in inspect.signature(zoo.MODELS[name]).parameters:
            raise ValueError(f"model {name} takes no sequence length; drop --seq")
        kwargs["seq"] = seq
    return zoo.build(name, **kwargs)


def _dynamic_shapes(inputs: tuple) -> tuple:
    """--dynamic: dim 0 of every input (the batch) and dim 1 of integer inputs (token ids: the
    sequence) may take any size from 1 (torch.export's Dim.AUTO would start them at 2)."""
    from torch.export import Dim

    batch, seq = Dim("batch", min=1), Dim("seq", min=1)
    spec = []
    for t in inputs:
        dims = {0: batch} if t.dim() >= 1 else {}
        if t.dim() >= 2 and not t.is_floating_point():
            dims[1] = seq
        spec.append(dims)
    return tuple(spec)


# A fix torch.export suggests when a dynamic dim is constrained: "seq = Dim('seq', max=512)",
# or "seq = 64" (the model needs that one size).
_FIX = re.compile(r"^\s*(\w+) = (?:Dim\('\w+'((?:, (?:min|max)=\d+)*)\)|(\d+))\s*$", re.M)


def _apply_fixes(message: str, spec: tuple) -> Optional[tuple]:
    """`spec` with the ranges torch.export's "Suggested fixes" give its named dims; None when
    the message suggests none this can apply."""
    from torch.export import Dim

    if "Suggested fixes:" not in message:
        return None
    ours = {dim.__name__: dim for dims in spec for dim in dims.values()}
    fixes = {}
    for name, bounds, const in _FIX.findall(message.split("Suggested fixes:", 1)[1]):
        if name not in ours:
            continue
        if const:
            fixes[name] = None  # static: that dim is no longer dynamic
        else:
            # A bound the fix leaves out keeps ours (min 1: torch's default would be 0, and it
            # does not check that the model holds at 0 or 1).
            kw = {k: int(v) for k, v in re.findall(r"(min|max)=(\d+)", bounds)}
            fixes[name] = Dim(name, min=kw.get("min", ours[name].min), max=kw.get("max", ours[name].max))
    if not fixes:
        return None
    return tuple({d: fixes.get(dim.__name__, dim) for d, dim in dims.items() if fixes.get(dim.__name__, dim) is not None}
                 for dims in spec)


def _cmd_export(args: argparse.Namespace, extra: list) -> int:
    import torch

    import updraft

    from . import zoo

    if ":" not in args.model and not _check_model(args.model):
        return 2
    # A dim that is 1 in the example is fixed by torch.export (1 is special to broadcasting):
    # a dynamic zoo model is traced at batch (and length) 2 at least.
    batch = max(args.batch, 2) if args.dynamic else args.batch
    seq = max(args.seq, 2) if args.dynamic and args.seq is not None else args.seq
    try:
        if ":" in args.model:
            if args.seq is not None:
                raise ValueError("--seq applies to zoo models; a module:function builds its own inputs")
            model, inputs = _load_model(args.model, batch)
        else:
            model, inputs = _example_inputs_for(args.model, batch, seq)
    except ValueError as e:
        print(f"updraft: {e}", file=sys.stderr)
        return 2
    config = getattr(model, "config", None)
    if getattr(config, "use_cache", False):
        config.use_cache = False  # a key/value cache is state between calls; a model file has none
    dynamic = _dynamic_shapes(inputs) if args.dynamic else None
    for attempt in range(3):
        try:
            info = updraft.export(model, inputs, args.output, dynamic_shapes=dynamic)
            break
        except updraft.export.ExportError as e:
            # A dim the model constrains (BERT's sequence <= 512): take torch's suggested range.
            refined = _apply_fixes(str(e.__cause__), dynamic) if dynamic is not None and attempt < 2 else None
            if refined is None:
                print(f"updraft: {e}", file=sys.stderr)
                return 1
            print("updraft: narrowing the dynamic dims as torch.export suggests and exporting again", file=sys.stderr)
            dynamic = refined
    print(info)
    if args.no_check:
        return 0
    loaded = updraft.load(args.output)
    with torch.no_grad():
        want = model(*inputs)
    got = loaded(*inputs)
    got = list(got) if isinstance(got, tuple) else [got]
    want = [w for w in torch.utils._pytree.tree_leaves(want) if isinstance(w, torch.Tensor)]
    worst = max(((g.double() - w.double()).abs().max().item() for g, w in zip(got, want) if g.numel()), default=0.0)
    ok = len(got) == len(want) and all(g.shape == w.shape for g, w in zip(got, want))
    print(f"check: loaded {loaded.info['file_bytes'] / 1e6:.1f} MB in {loaded.info['load_ms']:.1f} ms; "
          f"outputs vs eager: {'max abs difference ' + format(worst, '.3g') if ok else 'shapes differ'}")
    return 0 if ok else 1


def main(argv: Optional[list] = None) -> int:
    from . import __version__

    parser = argparse.ArgumentParser(prog="updraft", description="updraft torch.compile backend tools")
    parser.add_argument("--version", action="version", version=f"updraft {__version__}")
    sub = parser.add_subparsers(dest="command")

    p_ops = sub.add_parser("ops", help="list the ops the engine implements")
    p_ops.set_defaults(func=_cmd_ops)

    model_help = "a model name from updraft.zoo, e.g. mlp (small) or resnet50"
    p_explain = sub.add_parser(
        "explain", help="compile a zoo model with updraft and print its report",
        description="Builds a model from updraft.zoo (random weights), runs updraft.explain on it "
                    "and prints the report: ops in the engine vs in PyTorch, and why.")
    p_explain.add_argument("--model", required=True, metavar="NAME", help=model_help)
    p_explain.add_argument("--batch", type=int, default=1)
    p_explain.set_defaults(func=_cmd_explain)

    p_run = sub.add_parser(
        "run", help="run the demo on a zoo model: check against eager, time eager vs updraft",
        description="Same as `python -m updraft.demo`; its other options (--iters, --warmup, "
                    "--inductor) pass through.")
    p_run.add_argument("--model", default="resnet50", metavar="NAME", help=model_help)
    p_run.add_argument("--batch", type=int, default=1)
    p_run.set_defaults(func=_cmd_run)

    p_bisect = sub.add_parser(
        "bisect", help="find the engine pass or nodes that make a model's output differ from eager",
        description="Compiles the model with updraft, compares with eager PyTorch and, when they differ, "
                    "bisects over the engine passes and then over the aten nodes (updraft.debug.bisect); "
                    "writes a standalone reproducer. Exit status 0: no difference; 1: a difference.")
    p_bisect.add_argument("--model", required=True, metavar="NAME",
                          help=model_help + "; or module:function returning (model, inputs)")
    p_bisect.add_argument("--batch", type=int, default=1)
    p_bisect.add_argument("--out", default="updraft_bisect", metavar="DIR", help="reproducer folder")
    p_bisect.add_argument("--rtol", type=float, default=None)
    p_bisect.add_argument("--atol", type=float, default=None)
    p_bisect.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                          help="start from a config with this pass off (repeatable)")
    p_bisect.add_argument("--debug-fault", default="", metavar="pass:NAME|kernel:OP",
                          help="TEST-ONLY: inject a deliberate fault (CompilerConfig.debug_fault) to see bisect work")
    p_bisect.set_defaults(func=_cmd_bisect)

    p_export = sub.add_parser(
        "export", help="compile a model once into a model file (updraft.export) and check it",
        description="Exports a zoo model (random weights) or an importable module:function returning "
                    "(model, inputs) with updraft.export: one self-contained file that updraft.load and "
                    "updraft-run run without torch.compile. Then loads the file and prints the largest "
                    "difference from eager PyTorch. Exit status 0: written; 1: the model cannot be exported "
                    "(the ops the engine lacks are listed); 2: bad arguments.")
    p_export.add_argument("model", metavar="NAME|module:function",
                          help=model_help + "; or module:function returning (model, inputs)")
    p_export.add_argument("-o", "--output", required=True, metavar="FILE", help="the model file to write")
    p_export.add_argument("--batch", type=int, default=1, help="batch of the example inputs (zoo models)")
    p_export.add_argument("--seq", type=int, default=None, help="sequence length of a zoo language model")
    p_export.add_argument("--dynamic", action="store_true",
                          help="the batch dim (and the sequence dim of token inputs) may vary, from 1 up to what "
                               "torch.export finds the model allows")
    p_export.add_argument("--no-check", action="store_true", help="skip loading the file and comparing with eager")
    p_export.set_defaults(func=_cmd_export)

    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "run":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args, extra)


if __name__ == "__main__":
    sys.exit(main())
