"""Matrix products. An (m, k) @ (k, n) product is m*n*k multiply-adds = 2*m*n*k FLOPs.

A bias or ``input`` term (addmm, baddbmm, linear, addr) adds one FLOP per output element;
the alpha/beta scalings are not counted (they are 1 in every call that autograd or nn emit).
addbmm sums a batch of b products into one (m, n) output: b*m*n*k MACs, plus (b - 1)*m*n
adds across the batch already inside the MACs' accumulation.
Backward passes of these ops are themselves mm/bmm calls at ATen level, so they are costed by
these same rules.

Complex operands: one complex multiply-add is 4 real multiplies and 4 real adds, so a complex
product counts 4 real MACs (8 FLOPs) per complex MAC. Low-precision products (_scaled_mm for
fp8, _int_mm for int8) count the same MACs; the roofline picks the matching peak by dtype.
"""
from __future__ import annotations

import math

from op_costs.registry import MATRIX, Cost, register, register_named

aten = __import__("torch").ops.aten


COMPLEX_MAC = 4  # real multiply-adds per complex multiply-add


def matmul_cost(out_elements: int, k: int, bias: bool = False, dtype=None) -> Cost:
    """Cost of producing ``out_elements`` outputs, each a length-``k`` dot product."""
    is_complex = dtype is not None and dtype.is_complex
    macs = out_elements * k * (COMPLEX_MAC if is_complex else 1)
    bias_adds = out_elements * (2 if is_complex else 1) if bias else 0  # re and im
    return Cost(flops=2 * macs + bias_adds, macs=macs)


@register(aten.mm, aten.bmm, aten._int_mm, op_class=MATRIX)
def mm(a, b, *, out, **_):
    return matmul_cost(out.numel, a.shape[-1], dtype=a.dtype)


@register(aten._scaled_mm, op_class=MATRIX)
def scaled_mm(a, b, scale_a, scale_b, bias=None, *args, out, **_):
    """fp8 product with per-tensor/row scales: the MACs, plus a scale (and bias) per output."""
    cost = matmul_cost(out.numel, a.shape[-1], bias=bias is not None)
    return Cost(flops=cost.flops + out.numel, macs=cost.macs)


def grouped_products(a, b, out) -> Cost:
    """torch._grouped_mm's G products (a mixture of experts' expert layers), whose group
    boundaries ``offs`` holds as data. Three forms make each output element one length-k dot
    product with k = a's last dim: 2D x 3D ((M, K) rows split over G (K, N) experts), 3D x 2D
    ((G, M, K) by (K, N), columns split over the groups) and 3D x 3D (a bmm). 2D x 2D, the
    experts' weight gradient, splits K between G outputs of (M, N): out x K / G in all. This
    assumes the groups cover the split dimension (offs[-1] = its size), as a router's token
    counts do; every expert's weights are read, which bounds the bytes of one given no
    token."""
    weight_gradient = len(a.shape) == 2 and len(b.shape) == 2
    return matmul_cost(out.numel // out.shape[0] if weight_gradient else out.numel, a.shape[-1])


@register(aten._grouped_mm, op_class=MATRIX)
def grouped_mm(a, b, offs=None, bias=None, out_dtype=None, *, out, **_):
    cost = grouped_products(a, b, out)
    return Cost(flops=cost.flops + (out.numel if bias is not None else 0), macs=cost.macs)


# transformers' own grouped product (transformers.integrations.moe), which a mixture of
# experts runs under torch.compile where torch._grouped_mm does not serve it (fp32 weights):
# input (S, K), its rows sorted by expert; weight (E, K, N); offs, the experts' cumulative
# token counts. An mm per expert over its rows: each output row is a length-K dot product.
@register_named("transformers::grouped_mm_fallback", op_class=MATRIX)
def transformers_grouped_mm(input, weight, offs, *, out, **_):
    return grouped_products(input, weight, out)


@register_named("transformers::grouped_mm_fallback_backward", op_class=MATRIX)
def transformers_grouped_mm_backward(input, weight, offs, grad_output, *, out, **_):
    """The input gradient, grad_output (S, N) by each expert's weight transposed, and the
    weight gradient, each expert's input rows transposed by their grad_output rows: S x K x N
    multiply-adds each, the groups covering the S rows."""
    macs = 2 * math.prod(input.shape) * grad_output.shape[-1]
    return Cost(flops=2 * macs, macs=macs)


@register(aten._scaled_grouped_mm, aten._scaled_grouped_mm_v2, op_class=MATRIX)
def scaled_grouped_mm(a, b, *args, out, **_):
    """fp8 grouped products with their scales: the MACs plus a scale per output (a bias, when
    given, is not told apart: fp8 MoE layers carry none)."""
    cost = grouped_products(a, b, out)
    return Cost(flops=cost.flops + out.numel, macs=cost.macs)


@register(aten.addbmm, op_class=MATRIX)
def addbmm(bias, a, b, *, out, **_):
    products = matmul_cost(out.numel * a.shape[0], a.shape[-1], dtype=a.dtype)
    return Cost(flops=products.flops + out.numel, macs=products.macs)


@register(aten.addr, op_class=MATRIX)
def addr(bias, u, v, *, out, **_):
    """bias + outer(u, v): one multiply and one add per output element."""
    return Cost(flops=2 * out.numel, macs=out.numel)


@register(aten.addmm, aten.baddbmm, op_class=MATRIX)
def addmm(bias, a, b, *, out, **_):
    return matmul_cost(out.numel, a.shape[-1], bias=True, dtype=a.dtype)


@register(aten.linear, op_class=MATRIX)
def linear(x, weight, bias=None, *, out, **_):
    return matmul_cost(out.numel, weight.shape[-1], bias=bias is not None)


@register(aten.mv, aten.dot, aten.vdot, op_class=MATRIX)
def mv(a, b, *, out, **_):
    return matmul_cost(max(out.numel, 1), b.shape[0])


@register(aten.addmv, op_class=MATRIX)
def addmv(bias, mat, vec, *, out, **_):
    return matmul_cost(out.numel, vec.shape[0], bias=True)



# ---- pairwise distances and the trilinear product behind nn.Bilinear ------------------------
CDIST_PER_PAIR_DIM, CDIST_BACKWARD_PER_PAIR_DIM = 3, 4


@register(aten._cdist_forward, op_class=MATRIX)
def cdist(x1, x2, p, compute_mode=None, *, out, **_):
    """Per (i, j) pair over M features: sub, square (|.|^p), add, and a root per pair:
    3M (the root absorbed in the M - 1 adds' missing one)."""
    return Cost(flops=CDIST_PER_PAIR_DIM * out.numel * x1.shape[-1])


@register(aten._cdist_backward, op_class=MATRIX)
def cdist_backward(grad, x1, x2, p, dist, *, out, **_):
    """d dist / d x1 = (x1 - x2) / dist per pair and feature: sub, divide, times g, add."""
    return Cost(flops=CDIST_BACKWARD_PER_PAIR_DIM * grad.numel * x1.shape[-1])


@register(aten._euclidean_dist, op_class=MATRIX)
def euclidean_dist(x1, x2, *, out, **_):
    """cdist's matrix-product path: |a|^2 + |b|^2 - 2 a.b. Row norms 2M per row of x1 and x2,
    the product 2 P R M (P R M MACs), and per pair 2 adds, clamp and sqrt = 4."""
    p, r, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    batch = out.numel // max(p * r, 1)
    macs = batch * p * r * m
    return Cost(flops=2 * macs + batch * (2 * (p + r) * m + 4 * p * r), macs=macs)


@register(aten._pdist_forward, op_class=MATRIX)
def pdist(x, p=2.0, *, out, **_):
    return Cost(flops=CDIST_PER_PAIR_DIM * out.numel * x.shape[-1])


@register(aten._pdist_backward, op_class=MATRIX)
def pdist_backward(grad, x, p, dist, *, out, **_):
    return Cost(flops=CDIST_BACKWARD_PER_PAIR_DIM * grad.numel * x.shape[-1])


@register(aten._trilinear, op_class=MATRIX)
def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, *args, out, **_):
    """sum over ``sumdim`` of i1 * i2 * i3, each unsqueezed at its ``expand`` dims and
    broadcast: 2 multiplies and 1 add per term of the broadcast product (MACs: the terms)."""
    full = []
    for x, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        shape = list(x.shape)
        for d in sorted(expand):
            shape.insert(d, 1)
        full.append(shape)
    terms = math.prod(max(sizes) for sizes in zip(*full))
    return Cost(flops=3 * terms, macs=terms)
