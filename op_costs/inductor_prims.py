"""Inductor's own max-pool prims, which only its lowering emits (the compiled view's
post-grad graph). Registered by importing this module -- fxroof.compiled does, as it imports
Inductor anyway -- not by importing op_costs: defining the prims means importing
torch._inductor, about 2 s that an eager analysis does not need.

* max pool with offsets: the pooled values and each window's argmax as an int8 offset into
  the window instead of a flat index -- the same compares as max_pool2d_with_indices, any
  rank (the kernel's): out.numel * prod(kernel)
* offsets to indices:    integer index arithmetic per element, no floating-point operation
"""
from __future__ import annotations

import torch._inductor.inductor_prims  # noqa: F401  (defines torch.ops.prims._low_memory_*)

from op_costs.pooling import window
from op_costs.registry import VECTOR, Cost, first_output, register

prims = __import__("torch").ops.prims


@register(prims._low_memory_max_pool_with_offsets, op_class=VECTOR,
          name="max_pool_with_offsets")
def max_pool_with_offsets(x, kernel_size, *_, out, **__):
    return Cost(flops=first_output(out).numel * window(kernel_size, len(kernel_size)))


@register(prims._low_memory_max_pool_offsets_to_indices, op_class=VECTOR,
          name="max_pool_offsets_to_indices")
def max_pool_offsets_to_indices(offsets, *_, out, **__):
    """Integer index arithmetic per element, no floating-point operation."""
    return Cost(flops=0)
