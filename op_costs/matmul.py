"""Matrix products. An (m, k) @ (k, n) product is m*n*k multiply-adds = 2*m*n*k FLOPs.

A bias or ``input`` term (addmm, baddbmm, linear) adds one FLOP per output element; the
alpha/beta scalings are not counted (they are 1 in every call that autograd or nn emit).
Backward passes of these ops are themselves mm/bmm calls at ATen level, so they are costed by
these same rules.
"""
from __future__ import annotations

from op_costs.registry import MATRIX, Cost, register

aten = __import__("torch").ops.aten


def matmul_cost(out_elements: int, k: int, bias: bool = False) -> Cost:
    """Cost of producing ``out_elements`` outputs, each a length-``k`` dot product."""
    macs = out_elements * k
    return Cost(flops=2 * macs + (out_elements if bias else 0), macs=macs)


@register(aten.mm, aten.bmm, aten.matmul, op_class=MATRIX)
def mm(a, b, *, out, **_):
    # One length-k dot product per output element; for matmul, broadcast batch dims only
    # replicate whole products, and a 1-d left operand has k = its length.
    return matmul_cost(out.numel, a.shape[-1])


@register(aten.addmm, aten.baddbmm, op_class=MATRIX)
def addmm(bias, a, b, *, out, **_):
    return matmul_cost(out.numel, a.shape[-1], bias=True)


@register(aten.linear, op_class=MATRIX)
def linear(x, weight, bias=None, *, out, **_):
    return matmul_cost(out.numel, weight.shape[-1], bias=bias is not None)


@register(aten.mv, aten.dot, aten.vdot, op_class=MATRIX)
def mv(a, b, *, out, **_):
    return matmul_cost(max(out.numel, 1), b.shape[0])


@register(aten.addmv, op_class=MATRIX)
def addmv(bias, mat, vec, *, out, **_):
    return matmul_cost(out.numel, vec.shape[0], bias=True)


@register(aten.outer, op_class=MATRIX)
def outer(a, b, *, out, **_):
    return Cost(flops=out.numel, macs=0)
