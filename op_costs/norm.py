"""Batch, layer, group and RMS normalisation, forward and backward.

Per normalised element (x_hat = (x - mean) * rstd):
* statistics (training batch norm, layer/group norm): mean (1: add) + variance (3: sub,
  square, add) = 4;  RMS norm: mean of squares (2: square, add)
* normalise: 2 (sub mean, mul rstd);  RMS norm: 1 (mul rstd)
* affine: 1 for the weight, 1 for the bias, when present
Per-channel / per-row terms (rsqrt of the variance, running-stat updates) are O(C) and omitted.

Backward, per element, for the outputs ``output_mask`` asks for:
* grad_input with batch statistics (training BN, LN, GN):
  x_hat (2) + g*w (1, with weight) + sum(g*w) (1) + sum(g*w*x_hat) (2)
  + combine rstd*(g*w - mean1 - x_hat*mean2) (4)                       = 9 (+1 with weight)
* grad_input with fixed statistics (eval BN): g * w * rstd                = 1 (scale precomputed)
* grad_weight: sum(g * x_hat) = 2 (+2 for x_hat when grad_input did not compute it)
* grad_bias: sum(g) = 1
RMS norm backward: grad_input rstd*(g*w - x_hat*mean(g*w*x_hat)): x_hat 1, g*w 1, sum 2,
combine 3 = 7; grad_weight: sum(g * x_hat) = 2.

Weight norm (w = v * g / ||v||, the norm over every dim but `dim`), per element of v:
||v|| (2: square, add) + scale (1) = 3. Backward (ATen's WeightNorm kernels): grad_g =
sum(grad_w * v) / ||v|| (2: mul, add); grad_v = (g / ||v||) * grad_w - (g * grad_g /
||v||^2) * v (3: mul, mul, sub) = 5. Per-slice scalars (the root, g / ||v||) are omitted.

A layer norm's kernels (ATen's CPU and CUDA alike) read a contiguous input: a strided one
-- a transformer's residual stream behind nn.MultiheadAttention's (L, N, E) transposes,
ViT's -- is copied first (``input.expect_contiguous()``, and in the backward the output
gradient's and the input's ``contiguous()``: torch.profiler lists aten::contiguous and
aten::copy_ inside the node). Each copy reads and writes its operand once more; the rule
counts those bytes and names them, ``layer_norm[1 copy]`` (COPY_VARIANT), so that a time
model can price them as the copy kernels they are (fxroof.op_classes.contiguous_copies).

An embedding's max_norm (embedding_renorm_, in place before the lookup): ATen sorts the N
indices (N ceil(log2 N) comparisons), then for each distinct row of D computes its norm (2D)
and, where it exceeds max_norm, scales it (D). Which rows repeat or exceed the bound is
data, so the rule counts the upper bound: N distinct rows, all scaled, 3ND + N ceil(log2 N);
it reads the indices and the N rows and writes them back, never the whole table.
"""
from __future__ import annotations

import math

from op_costs.registry import VECTOR, Cost, register, standard_bytes

aten = __import__("torch").ops.aten

STATS, NORMALISE = 4, 2
# A batch norm that computes its statistics runs another kernel than one that applies
# running statistics: a reduction over the batch before the elementwise pass.
BATCH_STATS = "batch stats"
# ... and a layer norm that copies its strided operands first: "layer_norm[1 copy]",
# "layer_norm_backward[2 copies]"
COPY_VARIANT, COPIES_VARIANT = "copy", "copies"


def norm_forward_flops(numel: int, batch_stats: bool, weight, bias) -> int:
    per_element = (STATS if batch_stats else 0) + NORMALISE
    per_element += (weight is not None) + (bias is not None)
    return numel * per_element


def norm_backward_flops(numel: int, batch_stats: bool, weight, output_mask) -> int:
    want_input, want_weight, want_bias = output_mask
    per_element = 0
    if want_input:
        per_element += (9 + (weight is not None)) if batch_stats else 1
    if want_weight:
        per_element += 2 if (want_input and batch_stats) else 4  # reuse x_hat when it exists
    if want_bias:
        per_element += 1
    return numel * per_element


@register(aten.native_batch_norm, aten._native_batch_norm_legit,
          aten._native_batch_norm_legit_functional, aten.cudnn_batch_norm,
          aten.miopen_batch_norm, op_class=VECTOR)
def batch_norm(x, weight, bias, running_mean=None, running_var=None, training=True, *_,
               out, **__):
    # The `no_stats` overload has no running stats, so `training` lands on a float there;
    # without running stats the op can only use batch statistics.
    training = training if isinstance(training, bool) else True
    return Cost(flops=norm_forward_flops(x.numel, training, weight, bias),
                variant=BATCH_STATS if training else None)


@register(aten._batch_norm_with_update, aten._batch_norm_with_update_functional,
          op_class=VECTOR)
def batch_norm_with_update(x, weight, bias, *_, out, **__):
    return Cost(flops=norm_forward_flops(x.numel, True, weight, bias), variant=BATCH_STATS)


@register(aten._native_batch_norm_legit_no_training, aten._batch_norm_no_update,
          op_class=VECTOR)
def batch_norm_eval(x, weight, bias, *_, out, **__):
    return Cost(flops=norm_forward_flops(x.numel, False, weight, bias))


@register(aten.native_batch_norm_backward, op_class=VECTOR)
def batch_norm_backward(grad_out, x, weight, running_mean, running_var, save_mean,
                        save_invstd, train, eps, output_mask, *, out, **_):
    return Cost(flops=norm_backward_flops(x.numel, train, weight, output_mask))


@register(aten.batch_norm_backward, op_class=VECTOR)
def batch_norm_backward_update(grad_out, x, weight, running_mean, running_var, save_mean,
                               save_var, update, eps, output_mask, *_, out, **__):
    return Cost(flops=norm_backward_flops(x.numel, update, weight, output_mask))


@register(aten.cudnn_batch_norm_backward, aten.miopen_batch_norm_backward, op_class=VECTOR)
def batch_norm_backward_vendor(x, grad_out, weight, *_, out, **__):
    return Cost(flops=norm_backward_flops(x.numel, True, weight, (True, True, True)))


def with_contiguous_copies(flops: int, operands: tuple, out, copied: tuple) -> Cost:
    """A cost of ``flops`` whose standard traffic over ``operands`` and ``out`` grows by
    a read and a write of every tensor of ``copied`` that is not contiguous (the copy ATen
    makes first), the count named in the variant; the plain cost where none is."""
    strided = [t for t in copied if t is not None and not t.is_contiguous]
    if not strided:
        return Cost(flops=flops)
    read, written = standard_bytes(operands, {}, out)
    extra = sum(t.nbytes for t in strided)
    return Cost(flops=flops, bytes_read=read + extra, bytes_written=written + extra,
                variant=copy_variant(len(strided)))


def copy_variant(copies: int) -> str:
    return f"{copies} {COPY_VARIANT if copies == 1 else COPIES_VARIANT}"


@register(aten.native_layer_norm, op_class=VECTOR)
def layer_norm(x, normalized_shape, weight, bias, eps, *, out, **_):
    return with_contiguous_copies(norm_forward_flops(x.numel, True, weight, bias),
                                  (x, weight, bias), out, (x,))


@register(aten.native_layer_norm_backward, op_class=VECTOR)
def layer_norm_backward(grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask,
                        *, out, **_):
    return with_contiguous_copies(norm_backward_flops(x.numel, True, weight, output_mask),
                                  (grad_out, x, mean, rstd, weight, bias), out, (grad_out, x))


@register(aten.native_group_norm, op_class=VECTOR)
def group_norm(x, weight, bias, n, c, hxw, group, eps, *, out, **_):
    return Cost(flops=norm_forward_flops(x.numel, True, weight, bias))


@register(aten.native_group_norm_backward, op_class=VECTOR)
def group_norm_backward(grad_out, x, mean, rstd, weight, n, c, hxw, group, output_mask,
                        *, out, **_):
    return Cost(flops=norm_backward_flops(x.numel, True, weight, output_mask))


RMS_STATS, RMS_NORMALISE, RMS_BACKWARD_INPUT, RMS_BACKWARD_WEIGHT = 2, 1, 7, 2


@register(aten._fused_rms_norm, op_class=VECTOR)
def rms_norm(x, normalized_shape, weight=None, eps=None, *, out, **_):
    return Cost(flops=x.numel * (RMS_STATS + RMS_NORMALISE + (weight is not None)))


@register(aten._fused_rms_norm_backward, op_class=VECTOR)
def rms_norm_backward(grad_out, x, normalized_shape, rstd, weight, output_mask, *, out, **_):
    want_input, want_weight = output_mask[:2]
    return Cost(flops=x.numel * (RMS_BACKWARD_INPUT * want_input
                                 + RMS_BACKWARD_WEIGHT * want_weight))


WEIGHT_NORM, WEIGHT_NORM_BACKWARD = 3, 5


@register(aten._weight_norm_interface, op_class=VECTOR)
def weight_norm(v, g, dim=0, *, out, **_):
    return Cost(flops=v.numel * WEIGHT_NORM)


@register(aten._weight_norm_interface_backward, op_class=VECTOR)
def weight_norm_backward(grad_w, saved_v, saved_g, saved_norms, dim, *, out, **_):
    return Cost(flops=saved_v.numel * WEIGHT_NORM_BACKWARD)


RENORM_NORM, RENORM_SCALE = 2, 1


@register(aten.embedding_renorm, aten.embedding_renorm_, op_class=VECTOR)
def embedding_renorm(weight, indices, max_norm, norm_type, *, out, **_):
    n, row = indices.numel, weight.shape[-1]
    sort = n * math.ceil(math.log2(n)) if n > 1 else 0
    rows_bytes = n * row * weight.itemsize
    return Cost(flops=n * row * (RENORM_NORM + RENORM_SCALE) + sort,
                bytes_read=indices.nbytes + rows_bytes, bytes_written=rows_bytes)
