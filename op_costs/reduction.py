"""Reductions, scans, softmax, sorting and selection.

A reduction of n elements into one output takes n - 1 combining operations, so for m outputs
of N = n*m input elements it is N - m FLOPs. Work per output element (the divide of a mean,
the root of a norm) is added per output. In closed form (N inputs, m outputs):

* sum, prod, amax, amin, max, min, argmax, argmin, any, all, nansum, and any other op
  PyTorch tags ``reduction``: N - m
* aminmax: both extremes, 2 (N - m);  count_nonzero: a compare per input + N - m adds
* mean, nanmean: (n - 1) adds + 1 divide per output = N
* var, var_mean: mean (n) + sub (n) + square (n) + sum (n - 1) + divide (1) per output = 4N
* std, std_mean: 4N + a square root per output = 4N + m
* linalg_vector_norm / norm (counted for p = 2): square (n) + sum (n - 1) + root (1) = 2N
* logsumexp: max (n - 1) + sub (n) + exp (n) + sum (n - 1) + log (1) + add max back (1) = 4N
* dist (p = 2): sub (n) + square (n) + sum (n - 1) + root (1) = 3N
* trace: the sum of the min(rows, cols) diagonal elements: min(rows, cols) - 1
Scans along a dim of size d (R = N / d rows): cumsum, cumprod, cummax, cummin: N - R;
logcumsumexp: each step is a logaddexp (5): 5 (N - R).
Softmax / log_softmax: 5 per element (max, sub, exp, sum, divide-or-log); backward y * (g -
sum(g * y)) and g - exp(y) * sum(g): 4 per element.
Sorting and selection count comparisons (rows of d elements, R rows):
* sort: R * d * ceil(log2 d) (a comparison sort); topk k: R * d * ceil(log2 (k + 1)) (a
  size-k heap: one compare per level per element); kthvalue, median, nanmedian: 2 R d
  (expected comparisons of quickselect, rounded); mode: a sort plus a counting scan,
  R * d * (ceil(log2 d) + 1)
* bucketize / searchsorted over b boundaries: ceil(log2 (b + 1)) compares per input element;
  isin against t test elements: ceil(log2 (t + 1)) per element (binary search after a sort,
  the sort counted as t * ceil(log2 t))
* histc / histogram: per input element, 4 (sub, mul by bins / range, floor, add to bin)
"""
from __future__ import annotations

import math

import torch

from op_costs.registry import (MEMORY, VECTOR, Cost, TensorMeta, aten_op, first_output,
                               register, register_tag, tensors_in)

aten = torch.ops.aten


def log2_ceil(n: int) -> int:
    return max(math.ceil(math.log2(n)), 1) if n > 1 else 1


def reduction(per_input: int, per_output: int = 0, names_layout: bool = False):
    """(per_input * N + per_output * m) FLOPs for N inputs and m outputs; ``names_layout``:
    the rule names a reduction over the outer dimensions (COLUMNS) as its variant."""
    def rule(x, *args, out, **kwargs):
        dims = kwargs.get("dim", args[0] if args else None)
        variant = COLUMNS if names_layout and _over_columns(x, dims) else None
        return Cost(flops=per_input * x.numel + per_output * first_output(out).numel,
                    variant=variant)
    return rule


# A sum or mean whose reduced dimensions all lie outside the kept ones in memory (a bias
# gradient: (N x H x W, C) summed over the rows) runs ATen's CUDA reduce kernel in its
# column configuration (setReduceConfig, aten/src/ATen/native/cuda/Reduce.cuh: threads
# across the outputs, the rows split across blocks that a last block combines), which the
# rule names as its variant; one over the innermost dimensions (a global pool) does not
COLUMNS = "columns"
LAYOUT_NAMED = ("sum", "mean")


def _over_columns(x: TensorMeta, dims) -> bool:
    """Whether every reduced dimension (of more than one element) strides farther than some
    kept one: TensorIterator then reduces "not on the fastest striding dimension"."""
    if dims is None or isinstance(dims, bool):
        return False
    rank = len(x.shape)
    reduced = {d % rank for d in ((dims,) if isinstance(dims, int) else dims)} if rank else set()
    sizes = [(size, stride, d in reduced) for d, (size, stride)
             in enumerate(zip(x.shape, x.stride)) if size > 1]
    kept = [stride for size, stride, is_reduced in sizes if not is_reduced]
    folded = [stride for size, stride, is_reduced in sizes if is_reduced]
    return bool(kept and folded) and min(kept) < min(folded)


# (FLOPs per input element, per output element, ops) -- see the module docstring
_REDUCTIONS = [
    (1, -1, "sum prod amax amin max min argmax argmin any all nansum"),
    (2, -2, "aminmax"),
    (2, -1, "count_nonzero"),
    (1, 0, "mean"),
    (4, 0, "var var_mean"),
    (4, 1, "std std_mean"),
    (2, 0, "linalg_vector_norm norm"),
    (4, 0, "logsumexp"),
    (3, 0, "dist"),
    (1, 0, "hash_tensor"),
]
for per_input, per_output, names in _REDUCTIONS:
    for name in names.split():
        register(aten_op(name), op_class=VECTOR, name=f"reduction[{name}]")(
            reduction(per_input, per_output, names_layout=name in LAYOUT_NAMED))


@register_tag(torch.Tag.reduction, "reduction[tagged]")
def tagged_reduction(x, *args, out, **kwargs):
    return Cost(flops=x.numel - first_output(out).numel)


def _rows(x, dim: int) -> int:
    """Rows of a scan or sort along ``dim``: the elements divided by that dim's length."""
    if not x.shape:
        return 1
    return x.numel // max(x.shape[dim], 1)


def _scan(per_step: int):
    def rule(x, dim, *args, out, **kwargs):
        return Cost(flops=per_step * (x.numel - _rows(x, dim)))
    return rule


register(aten.cumsum, aten.cumprod, aten.cummax, aten.cummin, op_class=VECTOR,
         name="scan")(_scan(1))
register(aten.logcumsumexp, op_class=VECTOR, name="scan[logaddexp]")(_scan(5))


@register(aten.trace, op_class=VECTOR)
def trace(x, *, out, **_):
    return Cost(flops=max(min(x.shape) - 1, 0), bytes_read=min(x.shape) * x.itemsize)


@register(aten.renorm, op_class=VECTOR)
def renorm(x, p, dim, maxnorm, *, out, **_):
    """A norm per sub-tensor (2 per element) and a rescale (1 per element)."""
    return Cost(flops=3 * x.numel)


SOFTMAX = 5
SOFTMAX_BACKWARD = 4


@register(aten._softmax, aten._log_softmax, aten._safe_softmax, aten.softmax, aten.log_softmax,
          op_class=VECTOR)
def softmax(x, *args, out, **_):
    return Cost(flops=SOFTMAX * x.numel)


@register(aten._softmax_backward_data, aten._log_softmax_backward_data, op_class=VECTOR)
def softmax_backward(grad, y, *args, out, **_):
    return Cost(flops=SOFTMAX_BACKWARD * grad.numel)


# ---- sorting and selection: comparisons ------------------------------------------------------
@register(aten.sort, op_class=MEMORY)
def sort(x, *args, out, dim=-1, **kwargs):
    dim = next((a for a in args if isinstance(a, int) and not isinstance(a, bool)), dim)
    d = x.shape[dim] if x.shape else 1
    return Cost(flops=_rows(x, dim) * d * log2_ceil(d))


@register(aten.topk, op_class=MEMORY)
def topk(x, k, dim=-1, *args, out, **kwargs):
    d = x.shape[dim] if x.shape else 1
    return Cost(flops=_rows(x, dim) * d * log2_ceil(k + 1))


@register(aten.kthvalue, aten.median, aten.nanmedian, op_class=MEMORY)
def select_kth(x, *args, out, **kwargs):
    # A full median (no dim) selects over all elements: 2N either way.
    return Cost(flops=2 * x.numel)


@register(aten.mode, op_class=MEMORY)
def mode(x, dim=-1, *args, out, **kwargs):
    d = x.shape[dim] if x.shape else 1
    return Cost(flops=_rows(x, dim) * d * (log2_ceil(d) + 1))


@register(aten.bucketize, aten.searchsorted, op_class=MEMORY)
def binary_search(first, second, *args, out, **kwargs):
    # bucketize(input, boundaries), searchsorted(sorted_sequence, input): boundaries are 1-d
    # for bucketize, the sequence's last dim for searchsorted.
    result = first_output(out)
    is_bucketize = isinstance(first, TensorMeta) and first.numel == result.numel
    boundaries = second if is_bucketize else first
    b = boundaries.shape[-1] if boundaries.shape else 1
    return Cost(flops=result.numel * log2_ceil(b + 1))  # one search per output element


@register(aten.isin, op_class=MEMORY)
def isin(elements, test_elements, *args, out, **kwargs):
    t = test_elements.numel if hasattr(test_elements, "numel") else 1
    n = elements.numel if hasattr(elements, "numel") else 1
    return Cost(flops=t * log2_ceil(t) + n * log2_ceil(t + 1))


HISTOGRAM_PER_ELEMENT = 4


@register(aten.histc, aten.histogram, aten._histogramdd_from_bin_cts,
          aten._histogramdd_from_bin_tensors, op_class=MEMORY)
def histogram(x, *args, out, **kwargs):
    return Cost(flops=HISTOGRAM_PER_ELEMENT * x.numel)


@register(aten._histogramdd_bin_edges, op_class=MEMORY)
def histogram_bin_edges(x, *args, out, **kwargs):
    """min and max per dimension over the samples: 2 compares per element."""
    return Cost(flops=2 * x.numel)


@register(aten.segment_reduce, aten._segment_reduce_backward, op_class=VECTOR)
def segment_reduce(first, *args, out, **kwargs):
    """One combine per data element (sum, max, mean over its segment)."""
    return Cost(flops=max(t.numel for t in tensors_in((first, args))))
