"""Memory safety of what the process reads, from Python (issue 14, item 6): a size expression
whose constant arithmetic overflows int64 (INT64_MIN // -1 raised SIGFPE) is an exception."""

import pytest

from updraft import _C as C


@pytest.mark.parametrize(
    "expr",
    [
        "(-9223372036854775808)//(-1)",
        "9223372036854775807+1",
        "4611686018427387904*2",
        "s0-(-9223372036854775808)",
        "(" * 5000 + "1" + ")" * 5000,
    ],
)
def test_add_input_with_an_overflowing_dim_expression_raises(expr):
    g = C.Graph()
    with pytest.raises(C.UpdraftError, match=r"\[bindings\].*(overflows|operators)"):
        g.add_input("x", "f32", [expr])


def test_add_input_with_a_plain_expression_still_works():
    g = C.Graph()
    g.add_input("x", "f32", ["(s0*12)", "max(s1, 1)", 64])
