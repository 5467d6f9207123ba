"""The `updraft` command: `updraft --version`, `updraft ops`."""
from __future__ import annotations

import argparse
import sys
from typing import Optional


def _cmd_ops(args: argparse.Namespace) -> int:
    from . import _C

    names = _C.op_names()
    for name in names:
        print(name)
    print(f"{len(names)} engine ops", file=sys.stderr)
    return 0


def main(argv: Optional[list] = None) -> int:
    from . import __version__

    parser = argparse.ArgumentParser(prog="updraft", description="updraft torch.compile backend tools")
    parser.add_argument("--version", action="version", version=f"updraft {__version__}")
    sub = parser.add_subparsers(dest="command")
    p_ops = sub.add_parser("ops", help="list the ops the engine implements")
    p_ops.set_defaults(func=_cmd_ops)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
