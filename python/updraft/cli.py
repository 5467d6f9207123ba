"""The `updraft` command.

    updraft --version
    updraft ops                              # the ops the engine implements
    updraft explain --model mlp [--batch N]  # compile a zoo model, print what ran in the engine
    updraft run --model resnet50 [--batch N] [--iters N] [--warmup N] [--inductor]
                                             # python -m updraft.demo: check vs eager and time it
    updraft bisect --model mlp [--out DIR] [--debug-fault pass:NAME|kernel:OP] [--disable-pass NAME]
    updraft bisect --model my_pkg.models:build   # a function returning (model, inputs)
                                             # find the pass or nodes that make it differ from eager
"""
from __future__ import annotations

import argparse
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

    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "run":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args, extra)


if __name__ == "__main__":
    sys.exit(main())
