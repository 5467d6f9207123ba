"""updraft.debug: seeing inside a compiled model (docs/debugging.md).

Graph dumps (CompilerConfig(dump_dir=...)), tensor dumps, accuracy compare against eager and an
fp64 reference, bisection to the pass or node that makes a result wrong, and traces.
"""
from .bisect import BisectResult, bisect  # noqa: F401
from .dump import load_ir  # graph dumps: CompilerConfig(dump_dir=...), dump.py
from .compare import Comparison, compare, dump_tensors  # noqa: F401  (tensor dumps, accuracy compare)
