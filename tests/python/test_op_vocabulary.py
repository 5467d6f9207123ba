"""The front end derives its op vocabulary from the engine's op table (`_C.op_info()`):
same-name elementwise lowerings, the ops kept out of the decompositions and docs/ops.md's tables.
An engine op added with an aten twin (copysign, logit, erfinv...) is picked up by every test
here with no Python edit, and tested end to end by `test_same_name_op_runs_in_engine`."""
import math
import os
import subprocess
import sys

import pytest
import torch

import updraft
from updraft import _C
from updraft.backend import EXTRA_NATIVE_OPS, decompositions, native_ops
from updraft.lowering import DTYPES, LOWERINGS
from updraft.lowerer import lowering_for
from updraft.lowering_elementwise import aten_overloads, is_composite

aten = torch.ops.aten
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CLASSES = {"Elementwise", "Reduction", "Norm", "View", "DataMovement", "Compute", "Fused", "Random"}
INFO = _C.op_info()


def _main_overload(name):
    """aten.<name>.default or .Tensor (the all-tensor form), when aten has one a graph can hold."""
    ovs = {op._overloadname: op for op in aten_overloads(name)}
    return ovs.get("default") or ovs.get("Tensor")


SAME_NAME = sorted((i["name"], _main_overload(i["name"])) for i in INFO
                   if i["class"] == "Elementwise" and _main_overload(i["name"]) is not None)


def test_op_info_describes_every_op_in_table_order():
    assert [i["name"] for i in INFO] == list(_C.op_names())
    for i in INFO:
        assert i["class"] in CLASSES, i
        assert set(i["dtypes"]) <= set(DTYPES.values()), i
        assert i["max_inputs"] < 0 or i["min_inputs"] <= i["max_inputs"], i
        assert i["doc"], f"{i['name']} has no doc line"
        for a in i["attrs"]:
            assert a["required"] == (a["default"] is None), (i["name"], a)
    by = {i["name"]: i for i in INFO}
    assert by["gelu"]["attrs"] == [{"name": "approximate", "kind": "str", "required": False, "default": "none"}]
    assert by["pow_scalar"]["attrs"][0]["required"] and by["pow_scalar"]["attrs"][0]["kind"] == "float"
    assert by["clamp"]["attrs"][0]["default"] == -math.inf
    assert by["reshape"]["alias"] and by["reshape"]["class"] == "View"
    assert by["add"]["inplace"] and not by["eq"]["inplace"]
    assert (by["sort"]["num_outputs"], by["split"]["num_outputs"]) == (2, -1)
    assert (by["concat"]["min_inputs"], by["concat"]["max_inputs"]) == (1, -1)
    assert by["logical_and"]["dtypes"] == ["bool"] and by["reshape"]["dtypes"] == []
    assert by["slice"]["attrs"][1]["kind"] == "sym" and by["reshape"]["attrs"][0]["kind"] == "dims"


def test_every_same_name_elementwise_op_has_a_lowering():
    assert len(SAME_NAME) >= 60  # neg ... bitwise_or today: the list cannot silently empty
    missing = [name for name, op in SAME_NAME if lowering_for(op) is None]
    assert not missing, f"engine Elementwise ops with an aten twin but no lowering: {missing}"


def _inputs(info, seed):
    g = torch.Generator().manual_seed(seed)
    first = (info["dtypes"] or ["f32"])[0]  # the engine's first dtype: f32 for float ops
    dt = {"bool": torch.bool, "i64": torch.int64, "i32": torch.int64}.get(first, torch.float32)
    out = []
    for k in range(info["min_inputs"]):
        if dt == torch.bool:
            out.append(torch.randint(0, 2, (3, 5), generator=g).bool())
        elif dt == torch.int64:
            out.append(torch.randint(1, 9, (3, 5), generator=g))
        else:  # (0.1, 0.9) is inside every unary domain (acos, atanh, logit, log); divisors in (0.5, 1.5)
            out.append(torch.rand(3, 5, generator=g) * 0.8 + 0.1 + 0.4 * k)
    return out


@pytest.mark.parametrize("name,op", SAME_NAME, ids=[n for n, _ in SAME_NAME])
def test_same_name_op_runs_in_engine(name, op):
    info = next(i for i in INFO if i["name"] == name)
    xs = _inputs(info, seed=len(name))
    # The engine attributes' defaults, passed to aten by name: each reaches its attribute.
    args = {arg.name for arg in op._schema.arguments}
    kw = {a["name"]: a["default"] for a in info["attrs"] if not a["required"] and a["name"] in args}
    fn = lambda *a: op(*a, **kw)  # noqa: E731
    with torch.no_grad():
        ref = fn(*xs)
        got = torch.compile(fn, backend="updraft", fullgraph=True)(*xs)
    assert got.dtype == ref.dtype
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5, equal_nan=True)
    rep = updraft.last_report()
    assert rep.num_fallback_compute == 0, str(rep)


@pytest.mark.parametrize("fn,xs", [
    (lambda a: torch.remainder(2.5, a), (torch.rand(3, 5) + 0.5,)),  # remainder.Scalar_Tensor
    (lambda a: torch.bitwise_and(6, a), (torch.randint(0, 9, (3, 5)),)),  # bitwise_and.Scalar_Tensor
    (lambda a: torch.floor_divide(a, 2.5), (torch.randn(3, 5) * 5,)),  # floor_divide.Scalar, native now
    (lambda a: torch.sin(a), (torch.randint(0, 9, (3, 5)),)),  # int input, float result
    (lambda a: torch.logical_not(a), (torch.tensor([0.0, -0.0, math.nan, 2.0]),)),
    (lambda a: torch.pow(2.0, a), (torch.randn(3, 5),)),  # pow.Scalar
    (lambda a: a.sum(), (torch.randint(0, 5, (3, 5), dtype=torch.int32),)),  # sum.default, native now
    (lambda a: torch.split(a, 2, dim=1), (torch.randn(3, 5),)),  # split.Tensor, native now
], ids=["remainder_scalar_tensor", "bitwise_and_scalar_tensor", "floor_divide_scalar", "sin_int",
        "logical_not_float", "pow_scalar_base", "sum_int32", "split_tensor"])
def test_derived_overloads_match_eager(fn, xs):
    with torch.no_grad():
        ref = fn(*xs)
        got = torch.compile(fn, backend="updraft", fullgraph=True)(*xs)
    for g, r in zip(got if isinstance(got, tuple) else [got], ref if isinstance(ref, tuple) else [ref]):
        assert g.dtype == r.dtype
        torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-6, equal_nan=True)
    assert updraft.last_report().num_fallback_compute == 0, str(updraft.last_report())


def test_aten_argument_without_engine_attribute_stays_in_pytorch():
    # elu's alpha is an engine attribute; scale is not: the node falls back, with the reason.
    fn = lambda a: aten.elu.default(a, 1.0, 2.0)  # noqa: E731
    x = torch.randn(3, 5)
    with torch.no_grad():
        got = torch.compile(fn, backend="updraft")(x)
    torch.testing.assert_close(got, fn(x))
    rep = updraft.last_report()
    assert rep.num_fallback_compute == 1
    assert "scale=2.0" in str(rep) and "no scale attribute" in str(rep), str(rep)


def test_native_ops_are_derived_from_the_engine():
    native = native_ops()
    table = decompositions()
    # Derived (same name as an engine op, lowered): nothing lists them by hand.
    for op in (aten.silu.default, aten.hardswish.default, aten.hardsigmoid.default, aten.floor_divide.default):
        assert op in native and op not in EXTRA_NATIVE_OPS and op not in table
    names = set(_C.op_names())
    for op in native:
        assert lowering_for(op) is not None or op in EXTRA_NATIVE_OPS, op
        if op not in EXTRA_NATIVE_OPS:
            assert op._schema.name.split("::")[-1] in names and not is_composite(op), op
    # A composite with an engine twin stays decomposed (AOTAutograd would decompose it anyway).
    assert aten.matmul.default not in native


def test_ops_doc_is_current():
    script = os.path.join(ROOT, "tools", "gen_ops_doc.py")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(updraft.__file__)))
    r = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ops_doc_check_names_the_command(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import gen_ops_doc
    finally:
        sys.path.pop(0)
    with open(gen_ops_doc.DOC, encoding="utf-8") as f:
        text = f.read()
    stale = tmp_path / "ops.md"
    stale.write_text(text.replace("| atan2 |", "| atan2_old |"), encoding="utf-8")
    monkeypatch.setattr(gen_ops_doc, "DOC", str(stale))
    assert gen_ops_doc.main(["--check"]) == 1
    assert "run: python tools/gen_ops_doc.py" in capsys.readouterr().out
    assert gen_ops_doc.main([]) == 0  # regenerates
    assert stale.read_text(encoding="utf-8") == gen_ops_doc.render(text, INFO)
    assert gen_ops_doc.main(["--check"]) == 0
    with pytest.raises(SystemExit, match="no op-table block for class Elementwise"):
        gen_ops_doc.render(text.replace("<!-- op-table: Elementwise -->", "<!-- x -->"), INFO)
