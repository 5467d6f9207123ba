"""Writes docs/ops.md's op tables from the engine's op table (`updraft._C.op_info()`).

    python tools/gen_ops_doc.py            # rewrite the tables in docs/ops.md
    python tools/gen_ops_doc.py --check    # exit 1 if docs/ops.md is stale (what the test runs)

Each table sits between two markers, and only the text between them is rewritten; the prose
around them (conventions, per-op notes, the front end's multi-op lowerings) is hand-written:

    <!-- op-table: View DataMovement -->
    ...generated: one row per op of these classes, in op-table order...
    <!-- /op-table -->

A row says what the OpDef says: inputs (min-max, + when variadic), outputs, attributes (name:
kind = default; no default = required), input 0's accepted dtypes, whether output 0 may reuse
input 0's buffer (inplace) or is its memory (alias), and the one-line doc. Run it after adding
or changing an op; tests/python/test_op_vocabulary.py fails while the page is stale.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "ops.md")
REGEN = "python tools/gen_ops_doc.py"
_BLOCK = re.compile(r"(<!-- op-table: ([A-Za-z ]+) -->\n)(.*?)(<!-- /op-table -->)", re.S)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return repr(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe in a doc (|x|, a | b) would split the cell


def _inputs(info: dict) -> str:
    lo, hi = info["min_inputs"], info["max_inputs"]
    if hi < 0:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _attrs(info: dict) -> str:
    out = []
    for a in info["attrs"]:
        text = f"{a['name']}: {a['kind']}"
        if not a["required"]:
            text += f" = {_value(a['default'])}"
        out.append(text)
    return ", ".join(out)


def table(infos: list[dict], classes: list[str]) -> str:
    rows = ["| op | inputs | outputs | attributes | dtypes (input 0) | memory | computes |",
            "|---|---|---|---|---|---|---|"]
    for info in infos:
        if info["class"] not in classes:
            continue
        outputs = "variadic" if info["num_outputs"] < 0 else str(info["num_outputs"])
        memory = "alias" if info["alias"] else "inplace" if info["inplace"] else ""
        dtypes = " ".join(info["dtypes"]) or "any"
        cls = f" ({info['class']})" if len(classes) > 1 else ""
        rows.append(f"| {info['name']}{cls} | {_inputs(info)} | {outputs} | {_cell(_attrs(info))} | {dtypes} "
                    f"| {memory} | {_cell(info['doc'])} |")
    return "\n".join(rows) + "\n"


def render(text: str, infos: list[dict]) -> str:
    """`text` (docs/ops.md) with every marked table regenerated; raises if an op's class has no
    table, so a new class cannot go undocumented."""
    seen: set[str] = set()

    def fill(m: re.Match) -> str:
        classes = m.group(2).split()
        seen.update(classes)
        return m.group(1) + table(infos, classes) + m.group(4)

    out = _BLOCK.sub(fill, text)
    missing = sorted({i["class"] for i in infos} - seen)
    if missing:
        raise SystemExit(f"[docs] docs/ops.md has no op-table block for class {', '.join(missing)}; "
                         f"add '<!-- op-table: {missing[0]} -->' ... '<!-- /op-table -->' where it belongs")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="exit 1 if docs/ops.md differs from the op table")
    args = p.parse_args(argv)
    from updraft import _C

    with open(DOC, encoding="utf-8") as f:
        old = f.read()
    new = render(old, _C.op_info())
    if args.check:
        if new != old:
            print(f"[docs] docs/ops.md is stale (its op tables differ from the engine's op table); run: {REGEN}")
            return 1
        return 0
    if new != old:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
