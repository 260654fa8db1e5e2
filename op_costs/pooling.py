"""Max, average and adaptive pooling, forward and backward (1d/2d/3d).

* max pool:      one compare per window element per output: out.numel * prod(kernel)
* avg pool:      (window - 1) adds + 1 divide per output = out.numel * prod(kernel)
* adaptive pool: windows differ per output; output i along a dim of size n -> m covers
                 [floor(i*n/m), ceil((i+1)*n/m)), so FLOPs = lead * prod_d sum_i window_d(i)
                 (lead = the N*C elements in front of the pooled dims)
* max backward:  one add per grad_output element into its argmax (reads grad and indices only)
* avg backward:  each grad_output element is divided and added into its window:
                 grad_output.numel * prod(kernel), like the forward; adaptive likewise
"""
from __future__ import annotations

import math

from op_costs.registry import VECTOR, Cost, first_output, register

aten = __import__("torch").ops.aten


def window(kernel_size, rank: int) -> int:
    """Elements in one pooling window; a single size applies to every pooled dim."""
    ks = list(kernel_size) if isinstance(kernel_size, (list, tuple)) else [kernel_size]
    return math.prod(ks * rank if len(ks) == 1 else ks)


def adaptive_window_sum(n: int, m: int) -> int:
    """Sum over the m outputs of their window lengths when pooling n inputs adaptively."""
    return sum(-(-((i + 1) * n) // m) - (i * n) // m for i in range(m))


def adaptive_flops(x, pooled, rank: int) -> int:
    lead = math.prod(x.shape[:-rank])
    return lead * math.prod(adaptive_window_sum(n, m)
                            for n, m in zip(x.shape[-rank:], pooled.shape[-rank:], strict=True))


def _by_rank(rule_factory, name, **packets_by_rank):
    for rank, packets in packets_by_rank.items():
        register(*packets, op_class=VECTOR, name=name)(rule_factory(int(rank[1:])))


def _max_pool(rank):
    def rule(x, kernel_size, *_, out, **__):
        return Cost(flops=first_output(out).numel * window(kernel_size, rank))
    return rule


def _avg_pool(rank):
    def rule(x, kernel_size, *_, out, **__):
        return Cost(flops=out.numel * window(kernel_size, rank))
    return rule


def _avg_pool_backward(rank):
    def rule(grad_out, x, kernel_size, *_, out, **__):
        return Cost(flops=grad_out.numel * window(kernel_size, rank), bytes_read=grad_out.nbytes)
    return rule


def _adaptive_pool(rank):
    def rule(x, output_size, *, out, **_):
        return Cost(flops=adaptive_flops(x, first_output(out), rank))
    return rule


def _adaptive_avg_pool_backward(rank):
    def rule(grad_out, x, *, out, **_):
        return Cost(flops=adaptive_flops(x, grad_out, rank), bytes_read=grad_out.nbytes)
    return rule


def _argmax_scatter(rank):
    """max-pool backward (fixed or adaptive): one add per grad element at its argmax."""
    def rule(grad_out, *args, out, **_):
        indices = args[-1]
        return Cost(flops=grad_out.numel, bytes_read=grad_out.nbytes + indices.nbytes)
    return rule


# (max_pool1d/2d/3d decompose above the recorder into the *_with_indices forms.)
_by_rank(_max_pool, "max_pool", r2=[aten.max_pool2d_with_indices],
         r3=[aten.max_pool3d_with_indices])
_by_rank(_avg_pool, "avg_pool", r1=[aten.avg_pool1d], r2=[aten.avg_pool2d],
         r3=[aten.avg_pool3d])
_by_rank(_avg_pool_backward, "avg_pool_backward", r2=[aten.avg_pool2d_backward],
         r3=[aten.avg_pool3d_backward])
_by_rank(_adaptive_pool, "adaptive_pool",
         r1=[aten.adaptive_avg_pool1d],
         r2=[aten._adaptive_avg_pool2d, aten.adaptive_max_pool2d],
         r3=[aten._adaptive_avg_pool3d, aten.adaptive_max_pool3d])
_by_rank(_adaptive_avg_pool_backward, "adaptive_avg_pool_backward",
         r2=[aten._adaptive_avg_pool2d_backward], r3=[aten._adaptive_avg_pool3d_backward])
_by_rank(_argmax_scatter, "max_pool_backward",
         r2=[aten.max_pool2d_with_indices_backward, aten.adaptive_max_pool2d_backward],
         r3=[aten.max_pool3d_with_indices_backward, aten.adaptive_max_pool3d_backward])
_by_rank(_max_pool, "fractional_max_pool", r2=[aten.fractional_max_pool2d],
         r3=[aten.fractional_max_pool3d])
_by_rank(_argmax_scatter, "fractional_max_pool_backward",
         r2=[aten.fractional_max_pool2d_backward], r3=[aten.fractional_max_pool3d_backward])
