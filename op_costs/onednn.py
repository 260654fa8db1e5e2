"""Prepacked oneDNN / MKL kernels: what Inductor runs on a CPU with freezing on.

With ``torch._inductor.config.freezing = True``, Inductor folds batch norms into the
preceding convolution's weights, reorders every weight once into oneDNN's blocked layout
(``mkldnn._reorder_convolution_weight``, at compile time, not per call) and swaps the
convolution and the activation, or the residual add, that follows it for one fused call.
These are the ops such a graph calls (schemas in aten/src/ATen/native/mkldnn/ and
torch/_inductor/fx_passes/mkldnn_fusion.py):

* ``mkldnn._convolution_pointwise(X, W, B, padding, stride, dilation, groups, attr, ...)``:
  a convolution (MACs = out.numel * prod(W.shape[1:]), as ``op_costs.conv``), a bias add per
  output element, then the unary ``attr`` applied to each output element;
* its ``.binary`` overload ``(X, other, W, B, ..., binary_attr, alpha, unary_attr, ...)`` and
  the in-place ``mkldnn._convolution_pointwise_.binary(other, X, W, B, ...)``, which writes
  into ``other``: one binary op with ``other`` per output element, then ``unary_attr``;
* ``mkldnn._convolution_transpose_pointwise``: the transposed convolution (MACs = X.numel *
  prod(W.shape[1:])), bias and ``attr``;
* ``mkldnn._linear_pointwise(X, W, B, attr, ...)`` and ``.binary(X, other, W, B, attr)``:
  out.numel * in_features MACs, where W is (out_features, in_features);
* ``mkl._mkl_linear(X, MKL_W, ORI_W, B, batch_size)``: the same product, ``MKL_W`` being
  MKL's packed copy of ``ORI_W``. The packed buffer's size is MKL's choice (for a 1000 x 512
  fp32 weight packed for batch 1 it holds 1,786,913 floats), and MKL does not say how much of
  it a call reads; the rule counts the weight once, at ``ORI_W``'s size, and not ORI_W as a
  second operand (it is passed for its shape only).

The fused activations weigh what ``op_costs.pointwise`` gives their ATen ops ("swish" is
silu; "gelu" takes its ``algorithm``, "none" being erf's form). The weights are read on every
call in their blocked layout, which has their dense size (up to block padding, not counted).
"""
from __future__ import annotations

import math

import torch

from op_costs.pointwise import GELU_ERF, GELU_TANH, WEIGHTS
from op_costs.registry import MATRIX, Cost, register

mkldnn, mkl = torch.ops.mkldnn, torch.ops.mkl

# FLOPs per output element of each unary attr Inductor's mkldnn fusion emits
_UNARY = {"none": 0, "relu": WEIGHTS["relu"], "sigmoid": WEIGHTS["sigmoid"],
          "tanh": WEIGHTS["tanh"], "hardswish": WEIGHTS["hardswish"], "swish": WEIGHTS["silu"],
          "leaky_relu": WEIGHTS["leaky_relu"], "hardtanh": WEIGHTS["hardtanh"],
          "hardsigmoid": WEIGHTS["hardsigmoid"]}
_BINARY = {"add": 1, "sum": 1, "sub": 1, "mul": 1, "div": 1}
# the .binary overloads have 13 arguments, the unary ones 10 (schemas above)
_BINARY_CONV_ARGS = 13


def unary_flops(attr, algorithm, elements: int) -> int:
    """FLOPs of a fused unary ``attr`` over ``elements`` outputs; an attr this table does not
    name (a new fusion) counts one FLOP per element, like any tagged pointwise op."""
    if attr is None:
        return 0
    if attr == "gelu":
        return (GELU_TANH if algorithm == "tanh" else GELU_ERF) * elements
    return _UNARY.get(attr, 1) * elements


def _fused(macs: int, out, bias, binary_attr=None, unary_attr=None, algorithm=None) -> Cost:
    flops = 2 * macs + (out.numel if bias is not None else 0)
    flops += _BINARY.get(binary_attr, 1) * out.numel if binary_attr else 0
    flops += unary_flops(unary_attr, algorithm, out.numel)
    return Cost(flops=flops, macs=macs)


@register(mkldnn._convolution_pointwise, op_class=MATRIX)
def convolution_pointwise(x, *args, out, **_):
    if len(args) + 1 == _BINARY_CONV_ARGS:  # .binary: (X, other, W, B, ..., binary_attr, ...)
        _other, w, b, *_geometry, binary_attr, _alpha, unary_attr, _scalars, algorithm = args
        return _fused(out.numel * math.prod(w.shape[1:]), out, b, binary_attr, unary_attr,
                      algorithm)
    w, b, _padding, _stride, _dilation, _groups, attr, _scalars, algorithm = args
    return _fused(out.numel * math.prod(w.shape[1:]), out, b, unary_attr=attr,
                  algorithm=algorithm)


@register(mkldnn._convolution_pointwise_, op_class=MATRIX)
def convolution_pointwise_inplace(other, x, w, b, _padding, _stride, _dilation, _groups,
                                  binary_attr, _alpha, unary_attr, _scalars, algorithm, *,
                                  out, **_):
    """Writes into ``other``, which it also reads: the standard traffic (every operand read,
    the output written) is what it moves."""
    return _fused(out.numel * math.prod(w.shape[1:]), out, b, binary_attr, unary_attr,
                  algorithm)


@register(mkldnn._convolution_transpose_pointwise, op_class=MATRIX)
def convolution_transpose_pointwise(x, w, b, _padding, _output_padding, _stride, _dilation,
                                    _groups, attr, _scalars, algorithm, *, out, **_):
    return _fused(x.numel * math.prod(w.shape[1:]), out, b, unary_attr=attr,
                  algorithm=algorithm)


@register(mkldnn._linear_pointwise, op_class=MATRIX)
def linear_pointwise(x, *args, out, **_):
    if len(args) == 4:  # .binary: (X, other, W, B, attr), attr the binary op
        _other, w, b, attr = args
        return _fused(out.numel * w.shape[1], out, b, binary_attr=attr)
    w, b, attr, _scalars, algorithm = args
    return _fused(out.numel * w.shape[1], out, b, unary_attr=attr, algorithm=algorithm)


@register(mkl._mkl_linear, op_class=MATRIX)
def mkl_linear(x, _packed, weight, b, _batch_size, *, out, **_):
    bias = b.nbytes if b is not None else 0
    return Cost(flops=2 * out.numel * weight.shape[1] + (out.numel if b is not None else 0),
                macs=out.numel * weight.shape[1],
                bytes_read=x.nbytes + weight.nbytes + bias, bytes_written=out.nbytes)
