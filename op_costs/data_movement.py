"""Ops that move or create data but do no arithmetic (0 FLOPs), and views (0 FLOPs, 0 bytes).

* views (any op whose schema returns an alias of its input, plus _unsafe_view): free
* copies, casts, concatenation, padding, permutation copies: the standard model (read the
  source once, write the result once)
* allocations: ``empty*`` touches nothing; ``zeros``/``full``/``fill_`` write the output
* gathers (index, index_select, gather, embedding): read the indices and only the gathered
  elements (= output size), never the whole table; write the output
* scatters (index_put, scatter, index_add, embedding backward): an out-of-place scatter copies
  ``self`` (read + write all of it) and reads the indices and source; an in-place one reads the
  indices and source and writes the elements it updates; accumulating forms add 1 FLOP per
  source element
* view backwards (select/slice/as_strided backward): write a zero-filled input-sized gradient
  and read the incoming gradient
"""
from __future__ import annotations

from op_costs.registry import (MEMORY, VIEW, Cost, TensorMeta, register, tensors_in,
                               total_bytes)

aten = __import__("torch").ops.aten

FREE = Cost(flops=0, bytes_read=0, bytes_written=0)


@register("view", aten._unsafe_view, aten.alias, aten.detach, aten.lift_fresh, aten.as_strided_,
          aten._reshape_alias, aten.view, aten.reshape, aten.flatten, aten.unflatten,
          aten.contiguous, op_class=VIEW)
def view(*args, out, **kwargs):
    # reshape/flatten/contiguous copy only when the layout demands it, and then the copy
    # appears as its own clone/_unsafe_view op at ATen level.
    return FREE


@register(aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty,
          aten.new_empty_strided, aten.empty_permuted, op_class=MEMORY)
def allocation(*args, out, **kwargs):
    return FREE


@register(aten.zeros, aten.ones, aten.full, aten.zeros_like, aten.ones_like, aten.full_like,
          aten.new_zeros, aten.new_ones, aten.new_full, aten.scalar_tensor, aten.arange,
          aten.fill, aten.zero, aten.lift_fresh_copy, aten.rand, aten.randn, aten.rand_like,
          aten.randn_like, aten.randint, aten.uniform, aten.normal, aten.randperm,
          aten.linspace, aten.eye, op_class=MEMORY)
def fill(*args, out, **kwargs):
    """Writes its output; reads nothing but a scalar."""
    return Cost(bytes_read=0)


@register(aten.clone, aten._to_copy, aten.cat, aten.stack, aten.constant_pad_nd, aten.roll,
          aten.flip, aten.repeat, aten.tril, aten.triu, aten.reflection_pad1d,
          aten.reflection_pad2d, aten.reflection_pad3d, aten.replication_pad1d,
          aten.replication_pad2d, aten.replication_pad3d, aten.pixel_shuffle,
          aten.pixel_unshuffle, aten.channel_shuffle, aten.split_with_sizes_copy,
          aten.unfold_copy, aten.im2col, aten.col2im,
          aten.masked_select, aten.nonzero, aten.sort, aten.topk, op_class=MEMORY)
def copy(*args, out, **kwargs):
    return Cost()


@register(aten.copy_, aten.copy, op_class=MEMORY)
def copy_into(dst, src, *args, out, **kwargs):
    """Reads the source only; the destination is overwritten, not read."""
    return Cost(bytes_read=src.nbytes)


def _gather(table, *index_like, out):
    return Cost(bytes_read=total_bytes(tensors_in(index_like)) + out.nbytes)


@register(aten.index, op_class=MEMORY)
def index(x, indices, *, out, **_):
    return _gather(x, indices, out=out)


@register(aten.index_select, aten.gather, op_class=MEMORY)
def index_select(x, dim, index, *args, out, **_):
    return _gather(x, index, out=out)


@register(aten.embedding, op_class=MEMORY)
def embedding(weight, indices, *args, out, **_):
    return _gather(weight, indices, out=out)


def _scatter(self_, index_like, src, accumulate: bool, inplace: bool) -> Cost:
    """``src`` is the source tensor, or None when a scalar is scattered (one per index)."""
    indices = tensors_in(index_like)
    updates = src.numel if src is not None else max(i.numel for i in indices)
    flops = updates if accumulate else 0
    read = total_bytes(indices) + (src.nbytes if src is not None else 0)
    if inplace:
        return Cost(flops=flops, bytes_read=read, bytes_written=updates * self_.itemsize)
    return Cost(flops=flops, bytes_read=read + self_.nbytes, bytes_written=self_.nbytes)


@register(aten.index_put, op_class=MEMORY)
def index_put(x, indices, values, accumulate=False, *, out, **_):
    return _scatter(x, indices, values, accumulate, inplace=False)


@register(aten.index_put_, aten._index_put_impl_, op_class=MEMORY)
def index_put_(x, indices, values, accumulate=False, *args, out, **_):
    return _scatter(x, indices, values, accumulate, inplace=True)


def _dim_scatter(accumulate: bool, inplace: bool):
    def rule(x, dim, index, src, *args, out, **kwargs):
        source = src if isinstance(src, TensorMeta) else None
        return _scatter(x, [index], source, accumulate or "reduce" in kwargs, inplace)
    return rule


for _packets, _accumulate, _inplace in [
    ([aten.scatter, aten.index_copy], False, False),
    ([aten.scatter_add, aten.index_add, aten.scatter_reduce], True, False),
    ([aten.scatter_, aten.index_copy_], False, True),
    ([aten.scatter_add_, aten.index_add_, aten.scatter_reduce_], True, True),
]:
    register(*_packets, op_class=MEMORY, name="scatter")(_dim_scatter(_accumulate, _inplace))


@register(aten.embedding_dense_backward, op_class=MEMORY)
def embedding_backward(grad_out, indices, num_weights, *args, out, **_):
    # zero-fill the table gradient, then accumulate each row of grad_out into it
    return Cost(flops=grad_out.numel, bytes_read=grad_out.nbytes + indices.nbytes)


@register(aten.select_backward, aten.slice_backward, aten.as_strided_scatter,
          aten.select_scatter, aten.slice_scatter, aten.diagonal_backward, aten.unfold_backward,
          aten.index_select_backward, op_class=MEMORY)
def view_backward(grad_or_self, *args, out, **_):
    # The gradient of a view: a zero-filled input-sized tensor with grad written into it.
    return Cost(bytes_read=total_bytes(tensors_in(args)) + grad_or_self.nbytes)
