"""Scaled dot-product attention, every fused variant, forward and backward.

q is (B, H, L, E), k is (B, H, S, E), v is (B, H, S, Ev). Let P be the number of (query, key)
score pairs actually computed: B*H*L*S, or, with ``is_causal`` (top-left aligned, as PyTorch
defines it), B*H*sum_{i<L} min(i+1, S) -- fused kernels skip the masked half.

Forward, per pair: q.k (2E) + scale (1) + softmax (5: max, sub, exp, sum, div) + p.v (2Ev)
  [+ 1 for an additive/boolean mask, + 2 for dropout].
Backward (fused kernels recompute the scores), per pair: recompute q.k (2E) and p (3: scale,
  sub lse, exp), dV += p.dO (2Ev), dP = dO.v (2Ev), dS = p*(dP - D) (2), scale (1),
  dQ += dS.k (2E), dK += dS.q (2E); plus D = rowsum(dO * O): 2*Ev per query row.
MACs count the matrix products only: forward P*(E + Ev), backward P*(3E + 2Ev).
The unfused "math" path shows up as separate bmm/softmax ops and is costed by their rules.
"""
from __future__ import annotations

from op_costs.matmul import matmul_cost
from op_costs.norm import norm_forward_flops
from op_costs.pointwise import GELU_ERF
from op_costs.registry import MATRIX, Cost, TensorMeta, register, tensors_in, total_bytes

aten = __import__("torch").ops.aten

SOFTMAX_FLOPS = 5


def score_pairs(q, k, is_causal: bool) -> int:
    *batch, length, _ = q.shape
    source = k.shape[-2]
    heads = 1
    for n in batch:
        heads *= n
    if not is_causal:
        return heads * length * source
    # Row i sees keys 0..i (capped at S): sum_{i<L} min(i+1, S), in closed form.
    full = min(length, source)
    pairs = full * (full + 1) // 2 + max(length - source, 0) * source
    return heads * pairs


def attention_forward_cost(q, k, v, is_causal=False, masked=False, dropout_p=0.0) -> Cost:
    pairs = score_pairs(q, k, is_causal)
    e, ev = q.shape[-1], v.shape[-1]
    per_pair = 2 * e + 1 + SOFTMAX_FLOPS + 2 * ev + (1 if masked else 0) + (2 if dropout_p else 0)
    return Cost(flops=pairs * per_pair, macs=pairs * (e + ev))


def attention_backward_cost(q, k, v, is_causal=False, masked=False, dropout_p=0.0) -> Cost:
    pairs = score_pairs(q, k, is_causal)
    e, ev = q.shape[-1], v.shape[-1]
    per_pair = 6 * e + 4 * ev + 6 + (1 if masked else 0) + (2 if dropout_p else 0)
    rows = q.numel // e
    return Cost(flops=pairs * per_pair + rows * 2 * ev, macs=pairs * (3 * e + 2 * ev))


@register(aten._scaled_dot_product_flash_attention_for_cpu, op_class=MATRIX)
def sdpa_flash_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, out, attn_mask=None, **_):
    return attention_forward_cost(q, k, v, is_causal, attn_mask is not None, dropout_p)


@register(aten._scaled_dot_product_flash_attention_for_cpu_backward, op_class=MATRIX)
def sdpa_flash_cpu_backward(grad_out, q, k, v, o, lse, dropout_p, is_causal, *, out,
                            attn_mask=None, **_):
    return attention_backward_cost(q, k, v, is_causal, attn_mask is not None, dropout_p)


@register(aten._scaled_dot_product_flash_attention, op_class=MATRIX)
def sdpa_flash(q, k, v, dropout_p=0.0, is_causal=False, *_, out, **__):
    return attention_forward_cost(q, k, v, is_causal, False, dropout_p)


@register(aten._scaled_dot_product_flash_attention_backward, op_class=MATRIX)
def sdpa_flash_backward(grad_out, q, k, v, o, lse, cum_q, cum_k, max_q, max_k, dropout_p,
                        is_causal, *_, out, **__):
    return attention_backward_cost(q, k, v, is_causal, False, dropout_p)


@register(aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_cudnn_attention,
          op_class=MATRIX)
def sdpa_with_bias(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                   *_, out, **__):
    return attention_forward_cost(q, k, v, is_causal, attn_bias is not None, dropout_p)


@register(aten._scaled_dot_product_efficient_attention_backward, op_class=MATRIX)
def sdpa_efficient_backward(grad_out, q, k, v, attn_bias, o, lse, philox_seed, philox_offset,
                            dropout_p, grad_input_mask, is_causal=False, *_, out, **__):
    return attention_backward_cost(q, k, v, is_causal, attn_bias is not None, dropout_p)


@register(aten._scaled_dot_product_cudnn_attention_backward, op_class=MATRIX)
def sdpa_cudnn_backward(grad_out, q, k, v, o, lse, philox_seed, philox_offset, attn_bias,
                        cum_q, cum_k, max_q, max_k, dropout_p, is_causal, *_, out, **__):
    return attention_backward_cost(q, k, v, is_causal, attn_bias is not None, dropout_p)


# ---- the no-grad fast paths of nn.MultiheadAttention and nn.TransformerEncoderLayer --------
# One fused op each; their cost is the sum of what the slow path's ops cost for the same math,
# so switching between the paths never changes the count.

def _heads(x, batch: int, length: int, heads: int, head_dim: int):
    """The (B, H, L, E) per-head view of a projected (B, L, H*E) tensor."""
    return TensorMeta.contiguous((batch, heads, length, head_dim), x.dtype)


def multi_head_attention_cost(query, key, value, embed_dim, num_head, masked) -> Cost:
    """in-projections (addmm per q/k/v), attention over heads, out-projection (addmm)."""
    batch, length = query.shape[0], query.shape[-2]
    source = key.shape[-2]
    q_rows, kv_rows = batch * length, batch * source
    projections = [matmul_cost(rows * embed_dim, embed_dim, bias=True)
                   for rows in (q_rows, kv_rows, kv_rows, q_rows)]
    head_dim = embed_dim // num_head
    attention = attention_forward_cost(_heads(query, batch, length, num_head, head_dim),
                                       _heads(key, batch, source, num_head, head_dim),
                                       _heads(value, batch, source, num_head, head_dim),
                                       masked=masked)
    parts = projections + [attention]
    return Cost(flops=sum(p.flops for p in parts), macs=sum(p.macs for p in parts))


def fast_path_intermediate_elements(query, key, embed_dim: int, num_head: int) -> int:
    """Elements the fast path's kernel (ATen's native_multi_head_attention, CPU) writes to
    memory and reads back once more, between its operands and its result:
      qkv = in-projection               (B, T, 3D)  written, read by the bias/rescale/split
      q, k, v per head                  3 x (B, H, T, E)  written, read by the two bmm
      scores = q k^T, softmax(scores)   (B, H, T, S)  written twice, read twice
      context = p v                     (B, H, T, E)  written, read by the out-projection
    i.e. 7*B*T*D + 2*B*H*T*S elements each way. The CUDA kernel replaces the bmm-softmax-bmm
    by fused SDPA when it can, and then never writes the scores: there this overcounts by
    2*B*H*T*S elements each way."""
    batch, length, source = query.shape[0], query.shape[-2], key.shape[-2]
    return 7 * batch * length * embed_dim + 2 * batch * num_head * length * source


@register(aten._native_multi_head_attention, op_class=MATRIX)
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                                proj_weight, proj_bias, mask=None, *_, out, **__):
    cost = multi_head_attention_cost(query, key, value, embed_dim, num_head, mask is not None)
    operands = [t for t in (query, key, value, qkv_weight, qkv_bias, proj_weight, proj_bias,
                            mask) if t is not None]
    # q, k and v are one tensor in self-attention, read once by one in-projection GEMM
    # (the registry's default would count it three times)
    distinct = {id(t): t for t in operands}.values()
    extra = fast_path_intermediate_elements(query, key, embed_dim, num_head) * query.itemsize
    return Cost(flops=cost.flops, macs=cost.macs, bytes_read=total_bytes(distinct) + extra,
                bytes_written=total_bytes(tensors_in(out)) + extra)


@register(aten._transformer_encoder_layer_fwd, op_class=MATRIX)
def transformer_encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                              proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
                              norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
                              ffn_weight_2, ffn_bias_2, mask=None, *_, out, **__):
    """attention block + 2 residual adds + 2 layer norms + linear, activation, linear."""
    attention = multi_head_attention_cost(src, src, src, embed_dim, num_heads, mask is not None)
    tokens = src.numel // embed_dim
    hidden = ffn_weight_1.shape[0]
    ffn = [matmul_cost(tokens * hidden, embed_dim, bias=True),
           matmul_cost(tokens * embed_dim, hidden, bias=True)]
    activation = tokens * hidden * (GELU_ERF if use_gelu else 1)
    residuals = 2 * src.numel
    norms = 2 * norm_forward_flops(src.numel, True, norm_weight_1, norm_bias_1)
    flops = attention.flops + sum(c.flops for c in ffn) + activation + residuals + norms
    return Cost(flops=flops, macs=attention.macs + sum(c.macs for c in ffn))


# ---- the kernels below SDPA's dispatch: flash / memory-efficient take (B, L, H, E) ----------
def _bhle(x) -> TensorMeta:
    """(B, L, H, E) -> the (B, H, L, E) geometry the formulas use; a varlen (total, H, E)
    tensor counts as one sequence of all its tokens."""
    if len(x.shape) == 3:
        total, heads, dim = x.shape
        return TensorMeta.contiguous((1, heads, total, dim), x.dtype)
    b, length, heads, dim = x.shape
    return TensorMeta.contiguous((b, heads, length, dim), x.dtype)


def _window_causal(is_causal, custom_mask_type=0) -> bool:
    return bool(is_causal) or custom_mask_type in (1, 2)  # xformers' causal mask types


@register(aten._flash_attention_forward, op_class=MATRIX)
def flash_attention_forward(q, k, v, cum_q, cum_k, max_q, max_k, dropout_p, is_causal, *_,
                            out, **__):
    return attention_forward_cost(_bhle(q), _bhle(k), _bhle(v), is_causal, False, dropout_p)


@register(aten._flash_attention_backward, op_class=MATRIX)
def flash_attention_backward(grad_out, q, k, v, o, lse, cum_q, cum_k, max_q, max_k, dropout_p,
                             is_causal, *_, out, **__):
    return attention_backward_cost(_bhle(q), _bhle(k), _bhle(v), is_causal, False, dropout_p)


@register(aten._efficient_attention_forward, op_class=MATRIX)
def efficient_attention_forward(q, k, v, bias, cu_q, cu_k, max_q, max_k, dropout_p,
                                custom_mask_type, *_, out, **__):
    return attention_forward_cost(_bhle(q), _bhle(k), _bhle(v),
                                  _window_causal(False, custom_mask_type), bias is not None,
                                  dropout_p)


@register(aten._efficient_attention_backward, op_class=MATRIX)
def efficient_attention_backward(grad_out, q, k, v, bias, o, cu_q, cu_k, max_q, max_k, lse,
                                 dropout_p, seed, offset, custom_mask_type, *_, out, **__):
    return attention_backward_cost(_bhle(q), _bhle(k), _bhle(v),
                                   _window_causal(False, custom_mask_type), bias is not None,
                                   dropout_p)


@register(aten._cudnn_attention_forward, op_class=MATRIX)
def cudnn_attention_forward(q, k, v, attn_bias, cum_q, cum_k, max_q, max_k, compute_lse,
                            dropout_p=0.0, is_causal=False, *_, out, **__):
    return attention_forward_cost(q, k, v, is_causal, attn_bias is not None, dropout_p)


@register(aten._cudnn_attention_backward, op_class=MATRIX)
def cudnn_attention_backward(grad_out, q, k, v, o, lse, seed, offset, attn_bias, cum_q, cum_k,
                             max_q, max_k, dropout_p, is_causal, *_, out, **__):
    return attention_backward_cost(q, k, v, is_causal, attn_bias is not None, dropout_p)
