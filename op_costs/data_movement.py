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

import math

import torch

from op_costs.registry import (ANY_VIEW, MEMORY, VIEW, Cost, TensorMeta, first_output, register,
                               register_tag, tensors_in, total_bytes)
from op_costs.pointwise import STRIDED, loop_variant

aten = torch.ops.aten

FREE = Cost(flops=0, bytes_read=0, bytes_written=0)


@register(ANY_VIEW, aten._unsafe_view, aten.alias, aten.detach, aten.lift_fresh,
          aten.as_strided_, aten._reshape_alias, aten.view, aten.unsafe_split,
          aten.unsafe_split_with_sizes, op_class=VIEW)
def view(*args, out, **kwargs):
    # (reshape, flatten, contiguous decompose above the recorder: a copy they need appears as
    # its own clone / _unsafe_view op.) unsafe_split & co. return views whose schema does not
    # say so.
    return FREE


@register_tag(torch.Tag.inplace_view, "view[in place]", op_class=VIEW)
def inplace_view(*args, out, **kwargs):
    """squeeze_, transpose_, resize_ (of an empty tensor): metadata only."""
    return FREE


@register_tag(torch.Tag.view_copy, "copy[view_copy]", op_class=MEMORY)
def view_copy(src, *args, out, **kwargs):
    """The copying twin of a view (permute_copy, t_copy, ...): reads what it writes."""
    written = total_bytes(tensors_in(out))
    return Cost(bytes_read=min(src.nbytes, written) if written else 0, bytes_written=written)


@register(aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty,
          aten.new_empty_strided, aten.empty_permuted, op_class=MEMORY)
def allocation(*args, out, **kwargs):
    return FREE


@register(aten.zeros, aten.ones, aten.full, aten.zeros_like, aten.ones_like, aten.full_like,
          aten.new_zeros, aten.new_ones, aten.new_full, aten.scalar_tensor, aten.arange,
          aten.fill, aten.zero, aten.lift_fresh_copy, aten.rand, aten.randn, aten.rand_like,
          aten.randn_like, aten.randint, aten.uniform, aten.normal, aten.randperm,
          aten.linspace, aten.eye, aten.logspace, aten.randint_like, aten._efficientzerotensor,
          aten.cauchy, aten.exponential, aten.geometric, aten.log_normal, aten.random,
          torch.ops.prims.iota,  # arange's decomposed form, in Inductor's post-grad graphs
          op_class=MEMORY)
def fill(*args, out, **kwargs):
    """Writes its output; reads nothing but a scalar."""
    return Cost(bytes_read=0)


@register(aten.cat, aten.stack, aten.constant_pad_nd, aten.roll,
          aten.flip, aten.repeat, aten.tril, aten.triu, aten.reflection_pad1d,
          aten.reflection_pad2d, aten.reflection_pad3d, aten.replication_pad1d,
          aten.replication_pad2d, aten.replication_pad3d, aten.pixel_shuffle,
          aten.pixel_unshuffle, aten.channel_shuffle, aten.split_with_sizes_copy,
          aten.unfold_copy, aten.im2col, aten.col2im, aten.masked_select, aten.nonzero,
          aten.nonzero_static, aten._chunk_cat, aten.block_diag, aten.diag_embed, aten.rot90,
          aten.lu_unpack, aten.unique_consecutive, aten._unique2, aten.unique_dim,
          aten.repeat_interleave,
          op_class=MEMORY)
def copy(*args, out, **kwargs):
    return Cost()


# A copy whose source is laid out unlike its result -- a transposing clone, nn.
# MultiheadAttention's (L, N, E) q/k/v made contiguous -- is an elementwise copy through
# ATen's strided loop, one offset computed per element (op_costs.pointwise.loop_variant);
# the rule names it "copy[strided]". A dtype change alone (an autocast cast of a dense
# tensor) is not named: the copy kernel converts as it streams.
STRIDED_COPY = STRIDED


def _copy_variant(src, result) -> str | None:
    variant = loop_variant((src,), result) or ""
    return STRIDED_COPY if STRIDED in variant.split() else None


@register(aten.clone, aten._to_copy, op_class=MEMORY, name="copy")
def elementwise_copy(x, *args, out, **kwargs):
    return Cost(variant=_copy_variant(x, out))


@register(aten.copy_, aten.copy, op_class=MEMORY)
def copy_into(dst, src, *args, out, **kwargs):
    """Reads the source only; the destination is overwritten, not read."""
    return Cost(bytes_read=src.nbytes, variant=_copy_variant(src, dst))


def _gather(table, *index_like, out):
    return Cost(bytes_read=total_bytes(tensors_in(index_like)) + out.nbytes)


@register(aten.index, op_class=MEMORY)
def index(x, indices, *, out, **_):
    return _gather(x, indices, out=out)


@register(aten.index_select, aten.gather, op_class=MEMORY)
def index_select(x, dim, index, *args, out, **_):
    return _gather(x, index, out=out)


@register(aten.take, aten._unsafe_masked_index, aten.masked_scatter_backward, op_class=MEMORY)
def take(x, *index_like, out, **_):
    """take(x, index), _unsafe_masked_index(x, mask, indices, fill), masked_scatter_backward
    (grad, mask, sizes): read the index-like operands and the gathered elements only."""
    return _gather(x, *index_like, out=first_output(out))


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


@register(aten.put, op_class=MEMORY)
def put(x, index, source, accumulate=False, *, out, **_):
    return _scatter(x, [index], source, accumulate, inplace=False)


@register(aten._unsafe_masked_index_put_accumulate, op_class=MEMORY)
def masked_index_put_accumulate(x, mask, indices, values, *, out, **_):
    return _scatter(x, [mask, *indices], values, accumulate=True, inplace=False)


@register(aten.index_fill, aten.masked_scatter, op_class=MEMORY)
def fill_copy(x, *args, out, **_):
    """index_fill(x, dim, index, value), masked_scatter(x, mask, source): a copy of ``x`` with
    some elements replaced -- read it and the index/mask/source operands, write the result."""
    return Cost()


@register(aten.index_reduce, op_class=MEMORY)
def index_reduce(x, dim, index, source, reduce, *args, out, **_):
    return _scatter(x, [index], source, accumulate=True, inplace=False)


@register(aten.max_unpool2d, aten.max_unpool3d, op_class=MEMORY)
def max_unpool(x, indices, *args, out, **_):
    """Zero-fill the output and write each input element at its index."""
    return Cost(bytes_read=x.nbytes + indices.nbytes)


@register(aten.reflection_pad1d_backward, aten.reflection_pad2d_backward,
          aten.reflection_pad3d_backward, aten.replication_pad1d_backward,
          aten.replication_pad2d_backward, aten.replication_pad3d_backward, op_class=MEMORY)
def pad_backward(grad_out, x, padding, *, out, **_):
    """Each grad_output element is added into the input position it was copied from."""
    return Cost(flops=grad_out.numel, bytes_read=grad_out.nbytes)


@register(aten.embedding_dense_backward, op_class=MEMORY)
def embedding_backward(grad_out, indices, num_weights, *args, out, **_):
    # zero-fill the table gradient, then accumulate each row of grad_out into it
    return Cost(flops=grad_out.numel, bytes_read=grad_out.nbytes + indices.nbytes)


@register(aten.select_backward, aten.slice_backward, aten.as_strided_scatter,
          aten.select_scatter, aten.slice_scatter, aten.diagonal_backward, aten.unfold_backward,
          aten.diagonal_scatter, op_class=MEMORY)
def view_backward(grad_or_self, *args, out, **_):
    # The gradient of a view: a zero-filled input-sized tensor with grad written into it.
    return Cost(bytes_read=total_bytes(tensors_in(args)) + grad_or_self.nbytes)


# ---- embedding_bag: gather N rows of D, reduce them into B bags ---------------------------
BAG_SUM, BAG_MEAN, BAG_MAX = 0, 1, 2


@register(aten._embedding_bag, aten._embedding_bag_forward_only, op_class=MEMORY)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=BAG_SUM,
                  sparse=False, per_sample_weights=None, *_, out, **__):
    """N*D adds (sum) or compares (max) over the gathered rows, N*D multiplies with
    per-sample weights, a divide per output element for mean; reads only the gathered rows."""
    rows = indices.numel * weight.shape[-1]
    bags = first_output(out)
    flops = rows + (rows if per_sample_weights is not None else 0)
    flops += bags.numel if mode == BAG_MEAN else 0
    read = indices.nbytes + offsets.nbytes + rows * weight.itemsize
    read += per_sample_weights.nbytes if per_sample_weights is not None else 0
    return Cost(flops=flops, bytes_read=read)


@register(aten._embedding_bag_backward, aten._embedding_bag_dense_backward, op_class=MEMORY)
def embedding_bag_backward(grad, indices, *args, out, **__):
    """Scatter-add each bag's gradient row into the N looked-up table rows (N*D adds, and a
    divide each for mean) into a zero-filled table."""
    rows = indices.numel * grad.shape[-1]
    return Cost(flops=rows, bytes_read=grad.nbytes + indices.nbytes)


@register(aten._embedding_bag_per_sample_weights_backward, op_class=MEMORY)
def embedding_bag_per_sample_weights_backward(grad, weight, indices, *args, out, **_):
    """One D-long dot product of a bag's gradient with each looked-up row: 2D per index."""
    rows = indices.numel * weight.shape[-1]
    return Cost(flops=2 * rows, bytes_read=grad.nbytes + indices.nbytes + rows * weight.itemsize)


@register(aten.multinomial, op_class=MEMORY)
def multinomial(probs, num_samples, *args, out, **_):
    """A cumulative sum per row (d - 1 adds) and a binary search per sample."""
    d = probs.shape[-1]
    rows = probs.numel // max(d, 1)
    return Cost(flops=rows * (d - 1) + out.numel * max(math.ceil(math.log2(max(d, 2))), 1))
