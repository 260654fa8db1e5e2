"""Every cost rule against its closed form, called directly on tensor metadata.

Each case gives the op, its arguments (tensors as metadata) and the FLOPs / MACs / bytes that
the formula in the rule's module docstring yields, computed here from first principles.
A final test checks that every rule registered has at least one case here.
"""

import pytest
import torch

import op_costs
import op_costs.inductor_prims  # noqa: F401  (Inductor's max-pool prims and their rules)
from tests.conftest import T

aten = torch.ops.aten
F4 = 4  # bytes per float32
SELF = T(2, 6, 32)  # one (B=2, T=6, D=32) tensor passed as query, key and value


def est(op, *args, out, **kwargs):
    return op_costs.estimate(op, args, kwargs, out)


def run_case(op, args, kwargs, out):
    return op_costs.estimate(op, args, kwargs, out)


# (id, op, args, kwargs, out, expected {field: value})
B, M, K, N = 3, 5, 7, 11
CASES = [
    ("mm", aten.mm.default, (T(M, K), T(K, N)), {}, T(M, N),
     dict(macs=M * K * N, flops=2 * M * K * N, bytes_read=F4 * (M * K + K * N),
          bytes_written=F4 * M * N)),
    ("addmm", aten.addmm.default, (T(N), T(M, K), T(K, N)), {}, T(M, N),
     dict(macs=M * K * N, flops=2 * M * K * N + M * N,
          bytes_read=F4 * (N + M * K + K * N))),  # the broadcast bias is read at its size
    ("bmm", aten.bmm.default, (T(B, M, K), T(B, K, N)), {}, T(B, M, N),
     dict(macs=B * M * K * N, flops=2 * B * M * K * N)),
    ("baddbmm", aten.baddbmm.default, (T(B, M, N), T(B, M, K), T(B, K, N)), {}, T(B, M, N),
     dict(macs=B * M * K * N, flops=2 * B * M * K * N + B * M * N)),
    ("linear", aten.linear.default, (T(B, K), T(N, K), T(N)), {}, T(B, N),
     dict(macs=B * K * N, flops=2 * B * K * N + B * N)),
    ("mv", aten.mv.default, (T(M, K), T(K)), {}, T(M), dict(macs=M * K, flops=2 * M * K)),
    ("addmv", aten.addmv.default, (T(M), T(M, K), T(K)), {}, T(M),
     dict(macs=M * K, flops=2 * M * K + M)),
    ("addr", aten.addr.default, (T(M, N), T(M), T(N)), {}, T(M, N),
     dict(flops=2 * M * N, macs=M * N)),
    # addbmm: B products of (M, K) @ (K, N) summed into one (M, N), + the bias
    # grouped products, G = 3 groups, each summed as its own product:
    # 2D x 3D: 12 rows of K = 8 split 4 / 0 / 8 over three (8, 16) experts: (4 + 0 + 8) x 8 x 16
    ("_grouped_mm 2d x 3d", aten._grouped_mm.default,
     (T(12, 8, dtype=torch.bfloat16), T(3, 8, 16, dtype=torch.bfloat16), T(3, dtype=torch.int32)),
     {}, T(12, 16, dtype=torch.bfloat16),
     dict(macs=(4 + 0 + 8) * 8 * 16, flops=2 * 12 * 8 * 16,
          bytes_read=2 * (12 * 8 + 3 * 8 * 16) + 3 * 4, bytes_written=2 * 12 * 16)),
    # 3D x 2D: three (12, 8) @ (8, 16) column blocks of a (8, 48) weight
    ("_grouped_mm 3d x 2d", aten._grouped_mm.default,
     (T(3, 12, 8, dtype=torch.bfloat16), T(8, 48, dtype=torch.bfloat16), T(3, dtype=torch.int32)),
     {}, T(12, 48, dtype=torch.bfloat16), dict(macs=3 * 12 * 8 * 16)),
    # 2D x 2D (an expert weight gradient): K = 48 split in three 16s, three (16, 16) outputs
    ("_grouped_mm 2d x 2d", aten._grouped_mm.default,
     (T(16, 48, dtype=torch.bfloat16), T(48, 16, dtype=torch.bfloat16), T(3, dtype=torch.int32)),
     {}, T(3, 16, 16, dtype=torch.bfloat16), dict(macs=3 * 16 * 16 * 16)),
    # 3D x 3D is a bmm; the bias adds one FLOP per output
    ("_grouped_mm 3d x 3d + bias", aten._grouped_mm.default,
     (T(3, 16, 8, dtype=torch.bfloat16), T(3, 8, 16, dtype=torch.bfloat16), None,
      T(3, 16, dtype=torch.bfloat16)), {}, T(3, 16, 16, dtype=torch.bfloat16),
     dict(macs=3 * 16 * 8 * 16, flops=2 * 3 * 16 * 8 * 16 + 3 * 16 * 16)),
    # fp8 experts: the products plus one scale multiply per output
    ("_scaled_grouped_mm", aten._scaled_grouped_mm.default,
     (T(12, 16, dtype=torch.float8_e4m3fn), T(3, 16, 32, dtype=torch.float8_e4m3fn),
      T(12), T(3, 32), T(3, dtype=torch.int32)), {"out_dtype": torch.bfloat16},
     T(12, 32, dtype=torch.bfloat16),
     dict(macs=12 * 16 * 32, flops=2 * 12 * 16 * 32 + 12 * 32)),
    ("addbmm", aten.addbmm.default, (T(M, N), T(B, M, K), T(B, K, N)), {}, T(M, N),
     dict(macs=B * M * K * N, flops=2 * B * M * K * N + M * N)),
    # complex: each complex MAC is 4 real multiplies + 4 real adds = 4 real MACs
    ("mm complex", aten.mm.default, (T(M, K, dtype=torch.complex64), T(K, N, dtype=torch.complex64)),
     {}, T(M, N, dtype=torch.complex64), dict(macs=4 * M * K * N, flops=8 * M * K * N)),
    ("_int_mm", aten._int_mm.default, (T(32, 16, dtype=torch.int8), T(16, 8, dtype=torch.int8)),
     {}, T(32, 8, dtype=torch.int32),
     dict(macs=32 * 16 * 8, flops=2 * 32 * 16 * 8, bytes_read=32 * 16 + 16 * 8,
          bytes_written=32 * 8 * 4)),
    # fp8 product + one scale multiply per output
    ("_scaled_mm", aten._scaled_mm.default,
     (T(32, 16, dtype=torch.float8_e4m3fn), T(16, 8, dtype=torch.float8_e4m3fn), T(1), T(1)),
     {"out_dtype": torch.bfloat16}, T(32, 8, dtype=torch.bfloat16),
     dict(macs=32 * 16 * 8, flops=2 * 32 * 16 * 8 + 32 * 8)),
    # out= is the destination buffer, not a second operand
    ("mm out=", aten.mm.out, (T(M, K), T(K, N)), {"out": T(M, N)}, T(M, N),
     dict(macs=M * K * N, bytes_read=F4 * (M * K + K * N), bytes_written=F4 * M * N)),
    # conv2d: N=2, Cin=4, Cout=6, 9x9, k=3, stride 2, pad 1, groups 2 -> out 5x5
    ("convolution grouped", aten.convolution.default,
     (T(2, 4, 9, 9), T(6, 2, 3, 3), T(6), [2, 2], [1, 1], [1, 1], False, [0, 0], 2), {},
     T(2, 6, 5, 5),
     dict(macs=2 * 6 * 25 * (4 // 2) * 9, flops=2 * (2 * 6 * 25 * 2 * 9) + 2 * 6 * 25)),
    # transposed: in (2, 4, 5, 5), weight (Cin=4, Cout/g=3, 3, 3), groups 1 -> every input
    # element scatters into 3*9 outputs
    ("convolution transposed", aten.convolution.default,
     (T(2, 4, 5, 5), T(4, 3, 3, 3), None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1), {},
     T(2, 3, 11, 11), dict(macs=2 * 4 * 25 * 3 * 9, flops=2 * (2 * 4 * 25 * 3 * 9))),
    # the frozen (prepacked oneDNN) forms of the grouped conv above, as Inductor calls them
    # with freezing on: conv 2*6*25*2*9 MACs, bias 1 per output, relu 1 per output
    ("mkldnn conv pointwise + relu", torch.ops.mkldnn._convolution_pointwise.default,
     (T(2, 4, 9, 9), T(6, 2, 3, 3), T(6), [1, 1], [2, 2], [1, 1], 2, "relu", [], ""), {},
     T(2, 6, 5, 5),
     dict(macs=2 * 6 * 25 * 2 * 9, flops=2 * (2 * 6 * 25 * 2 * 9) + 2 * (2 * 6 * 25),
          bytes_read=F4 * (2 * 4 * 81 + 6 * 2 * 9 + 6), bytes_written=F4 * 2 * 6 * 25)),
    # gelu (erf form): 0.5 * x * (1 + erf(x / sqrt 2)) = 5 FLOPs per output, no bias
    ("mkldnn conv pointwise + gelu", torch.ops.mkldnn._convolution_pointwise.default,
     (T(2, 4, 9, 9), T(6, 2, 3, 3), None, [1, 1], [2, 2], [1, 1], 2, "gelu", [], "none"), {},
     T(2, 6, 5, 5),
     dict(macs=2 * 6 * 25 * 2 * 9, flops=2 * (2 * 6 * 25 * 2 * 9) + 5 * (2 * 6 * 25))),
    # + a residual: one add with `other` and a relu per output; `other` is read too
    ("mkldnn conv pointwise binary", torch.ops.mkldnn._convolution_pointwise.binary,
     (T(2, 4, 9, 9), T(2, 6, 5, 5), T(6, 2, 3, 3), T(6), [1, 1], [2, 2], [1, 1], 2, "add",
      1.0, "relu", [], ""), {}, T(2, 6, 5, 5),
     dict(macs=2 * 6 * 25 * 2 * 9, flops=2 * (2 * 6 * 25 * 2 * 9) + 3 * (2 * 6 * 25),
          bytes_read=F4 * (2 * 4 * 81 + 2 * 6 * 25 + 6 * 2 * 9 + 6),
          bytes_written=F4 * 2 * 6 * 25)),
    # in place: `other` first, read and overwritten; no unary op after the add
    ("mkldnn conv pointwise_ binary", torch.ops.mkldnn._convolution_pointwise_.binary,
     (T(2, 6, 5, 5), T(2, 4, 9, 9), T(6, 2, 3, 3), T(6), [1, 1], [2, 2], [1, 1], 2, "add",
      1.0, None, [], None), {}, T(2, 6, 5, 5),
     dict(macs=2 * 6 * 25 * 2 * 9, flops=2 * (2 * 6 * 25 * 2 * 9) + 2 * (2 * 6 * 25),
          bytes_read=F4 * (2 * 6 * 25 + 2 * 4 * 81 + 6 * 2 * 9 + 6),
          bytes_written=F4 * 2 * 6 * 25)),
    # transposed, as "convolution transposed" above: 2*4*25 inputs x 3*9 taps, no bias or attr
    ("mkldnn conv transpose pointwise", torch.ops.mkldnn._convolution_transpose_pointwise.default,
     (T(2, 4, 5, 5), T(4, 3, 3, 3), None, [0, 0], [0, 0], [2, 2], [1, 1], 1, "none", [], ""),
     {}, T(2, 3, 11, 11), dict(macs=2 * 4 * 25 * 3 * 9, flops=2 * (2 * 4 * 25 * 3 * 9))),
    # linear (B, K) x (N, K)^T + bias, then hardswish: x * min(max(x + 3, 0), 6) / 6 = 5
    ("mkldnn linear pointwise", torch.ops.mkldnn._linear_pointwise.default,
     (T(B, K), T(N, K), T(N), "hardswish", [], ""), {}, T(B, N),
     dict(macs=B * K * N, flops=2 * B * K * N + B * N + 5 * B * N)),
    ("mkldnn linear pointwise binary", torch.ops.mkldnn._linear_pointwise.binary,
     (T(B, K), T(B, N), T(N, K), T(N), "mul"), {}, T(B, N),
     dict(macs=B * K * N, flops=2 * B * K * N + 2 * B * N,
          bytes_read=F4 * (B * K + B * N + N * K + N))),
    # MKL's packed weight (any size MKL picks) is not counted; the original weight once
    ("mkl linear", torch.ops.mkl._mkl_linear.default,
     (T(B, K), T(5000, 1), T(N, K), T(N), B), {}, T(B, N),
     dict(macs=B * K * N, flops=2 * B * K * N + B * N,
          bytes_read=F4 * (B * K + N * K + N), bytes_written=F4 * B * N)),
    # backward of the grouped conv above, all three gradients
    ("convolution_backward all", aten.convolution_backward.default,
     (T(2, 6, 5, 5), T(2, 4, 9, 9), T(6, 2, 3, 3), [6], [2, 2], [1, 1], [1, 1], False, [0, 0],
      2, [True, True, True]), {}, (T(2, 4, 9, 9), T(6, 2, 3, 3), T(6)),
     dict(macs=2 * (2 * 6 * 25 * 2 * 9), flops=4 * (2 * 6 * 25 * 2 * 9) + 2 * 6 * 25,
          bytes_read=F4 * (2 * 6 * 25 + 6 * 2 * 9 + 2 * 4 * 81),
          bytes_written=F4 * (2 * 4 * 81 + 6 * 2 * 9 + 6))),
    # the first layer of a network: no grad_input, so no weight read for it and half the MACs
    ("convolution_backward weight only", aten.convolution_backward.default,
     (T(2, 6, 5, 5), T(2, 4, 9, 9), T(6, 2, 3, 3), None, [2, 2], [1, 1], [1, 1], False, [0, 0],
      2, [False, True, False]), {}, (None, T(6, 2, 3, 3), None),
     dict(macs=2 * 6 * 25 * 2 * 9, flops=2 * (2 * 6 * 25 * 2 * 9),
          bytes_read=F4 * (2 * 6 * 25 + 2 * 4 * 81), bytes_written=F4 * 6 * 2 * 9)),
    # attention: B*H = 2*3, L = 4, S = 6, E = 8, Ev = 5
    ("sdpa cpu", aten._scaled_dot_product_flash_attention_for_cpu.default,
     (T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 5)), {}, (T(2, 3, 4, 5), T(2, 3, 4)),
     dict(macs=6 * 4 * 6 * (8 + 5), flops=6 * 4 * 6 * (2 * 8 + 1 + 5 + 2 * 5))),
    # causal, L = 4 <= S = 6: row i sees i + 1 keys -> 1 + 2 + 3 + 4 = 10 pairs per head
    ("sdpa cpu causal", aten._scaled_dot_product_flash_attention_for_cpu.default,
     (T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 5), 0.0, True), {}, (T(2, 3, 4, 5), T(2, 3, 4)),
     dict(macs=6 * 10 * (8 + 5))),
    ("sdpa cpu masked", aten._scaled_dot_product_flash_attention_for_cpu.default,
     (T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 5)), {"attn_mask": T(4, 6)},
     (T(2, 3, 4, 5), T(2, 3, 4)), dict(flops=6 * 4 * 6 * (2 * 8 + 1 + 5 + 2 * 5 + 1))),
    ("sdpa cpu backward", aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
     (T(2, 3, 4, 5), T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 5), T(2, 3, 4, 5), T(2, 3, 4),
      0.0, False), {}, (T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 5)),
     dict(macs=6 * 24 * (3 * 8 + 2 * 5),
          flops=6 * 24 * (6 * 8 + 4 * 5 + 6) + 6 * 4 * 2 * 5)),
    ("sdpa flash (cuda) causal", aten._scaled_dot_product_flash_attention.default,
     (T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 8), 0.0, True), {}, (T(2, 3, 4, 8),),
     dict(macs=6 * 10 * 16)),
    ("sdpa flash backward (cuda)", aten._scaled_dot_product_flash_attention_backward.default,
     (T(2, 3, 4, 8), T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 8), T(2, 3, 4, 8), T(2, 3, 4),
      None, None, 4, 6, 0.0, False, None, None), {}, (T(2, 3, 4, 8),) * 3,
     dict(macs=6 * 24 * 5 * 8)),
    ("sdpa efficient", aten._scaled_dot_product_efficient_attention.default,
     (T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 8), T(2, 3, 4, 6), True), {}, (T(2, 3, 4, 8),),
     dict(macs=6 * 24 * 16, flops=6 * 24 * (2 * 8 + 1 + 5 + 2 * 8 + 1))),
    ("sdpa efficient backward", aten._scaled_dot_product_efficient_attention_backward.default,
     (T(2, 3, 4, 8), T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 8), None, T(2, 3, 4, 8),
      T(2, 3, 4), None, None, 0.0, [True, True, True, False]), {}, (T(2, 3, 4, 8),) * 3,
     dict(macs=6 * 24 * 5 * 8)),
    ("sdpa cudnn backward causal", aten._scaled_dot_product_cudnn_attention_backward.default,
     (T(2, 3, 4, 8), T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 8), T(2, 3, 4, 8), T(2, 3, 4),
      None, None, None, None, None, 4, 6, 0.0, True), {}, (T(2, 3, 4, 8),) * 3,
     dict(macs=6 * 10 * 5 * 8)),
    # nn.MultiheadAttention fast path: B=2, L=S=6, D=32, H=4 (E=8), 12 tokens.
    # projections q, k, v, out: 4 x (12*32 outputs x 32) = 49152 MACs, + 4*384 bias adds;
    # attention: 2*4*36 = 288 pairs x (8 + 8) MACs, 288 x (16 + 1 + 5 + 16) FLOPs
    ("native multi-head attention", aten._native_multi_head_attention.default,
     (T(2, 6, 32), T(2, 6, 32), T(2, 6, 32), 32, 4, T(96, 32), T(96), T(32, 32), T(32)), {},
     (T(2, 6, 32), T(0)),
     dict(macs=49152 + 4608, flops=2 * 49152 + 4 * 384 + 288 * 38)),
    # its bytes, in self-attention (q, k, v one tensor, read once by one in-projection GEMM):
    # operands x 384 + weights 96*32 + 96 + 32*32 + 32 = 4608 elements; the CPU kernel's
    # intermediates, each written and read back: qkv 2*6*96 = 1152, q/k/v per head 1152,
    # scores 2*4*6*6 = 288 twice (bmm, softmax), context 384 -> 3264 elements each way
    ("native multi-head attention bytes", aten._native_multi_head_attention.default,
     (SELF, SELF, SELF, 32, 4, T(96, 32), T(96), T(32, 32), T(32)), {}, (T(2, 6, 32), T(0)),
     dict(bytes_read=F4 * (4608 + 3264), bytes_written=F4 * (384 + 3264))),
    # + FFN 32 -> 64 -> 32 (2 x 24576 MACs, bias 768 + 384), relu 768, 2 residual adds 768,
    # 2 layer norms 2 x 384 x 8
    ("transformer encoder layer", aten._transformer_encoder_layer_fwd.default,
     (T(2, 6, 32), 32, 4, T(96, 32), T(96), T(32, 32), T(32), False, False, 1e-5, T(32), T(32),
      T(32), T(32), T(64, 32), T(64), T(32, 64), T(32)), {}, T(2, 6, 32),
     dict(macs=53760 + 49152,
          flops=(2 * 49152 + 4 * 384 + 288 * 38) + (2 * 49152 + 768 + 384) + 768 + 768
          + 2 * 384 * 8)),
    # norms over x of 2*4*3*3 = 72 elements
    ("batch_norm train", aten.native_batch_norm.default,
     (T(2, 4, 3, 3), T(4), T(4), T(4), T(4), True, 0.1, 1e-5), {}, (T(2, 4, 3, 3), T(4), T(4)),
     dict(flops=72 * (4 + 2 + 2))),
    ("batch_norm eval", aten.native_batch_norm.default,
     (T(2, 4, 3, 3), T(4), T(4), T(4), T(4), False, 0.1, 1e-5), {}, (T(2, 4, 3, 3), T(0), T(0)),
     dict(flops=72 * (2 + 2))),
    ("batch_norm no-training", aten._native_batch_norm_legit_no_training.default,
     (T(2, 4, 3, 3), None, None, T(4), T(4), 0.1, 1e-5), {}, (T(2, 4, 3, 3), T(0), T(0)),
     dict(flops=72 * 2)),
    ("batch_norm with update", aten._batch_norm_with_update.default,
     (T(2, 4, 3, 3), T(4), T(4), T(4), T(4), 0.1, 1e-5), {}, (T(2, 4, 3, 3),),
     dict(flops=72 * 8)),
    ("batch_norm_backward train", aten.native_batch_norm_backward.default,
     (T(2, 4, 3, 3), T(2, 4, 3, 3), T(4), T(4), T(4), T(4), T(4), True, 1e-5,
      [True, True, True]), {}, (T(2, 4, 3, 3), T(4), T(4)),
     dict(flops=72 * (10 + 2 + 1))),
    ("batch_norm_backward eval", aten.native_batch_norm_backward.default,
     (T(2, 4, 3, 3), T(2, 4, 3, 3), T(4), T(4), T(4), None, None, False, 1e-5,
      [True, False, False]), {}, (T(2, 4, 3, 3), None, None), dict(flops=72 * 1)),
    ("batch_norm_backward update", aten.batch_norm_backward.default,
     (T(2, 4, 3, 3), T(2, 4, 3, 3), T(4), T(4), T(4), T(4), T(4), True, 1e-5,
      [False, True, True], T(0)), {}, (None, T(4), T(4)), dict(flops=72 * (4 + 1))),
    ("cudnn batch_norm backward", aten.cudnn_batch_norm_backward.default,
     (T(2, 4, 3, 3), T(2, 4, 3, 3), T(4), T(4), T(4), T(4), T(4), 1e-5, T(0)), {},
     (T(2, 4, 3, 3), T(4), T(4)), dict(flops=72 * 13)),
    ("layer_norm", aten.native_layer_norm.default, (T(6, 16), [16], T(16), T(16), 1e-5), {},
     (T(6, 16), T(6, 1), T(6, 1)), dict(flops=96 * 8)),
    ("layer_norm no affine", aten.native_layer_norm.default, (T(6, 16), [16], None, None, 1e-5),
     {}, (T(6, 16), T(6, 1), T(6, 1)), dict(flops=96 * 6)),
    ("layer_norm_backward", aten.native_layer_norm_backward.default,
     (T(6, 16), T(6, 16), [16], T(6, 1), T(6, 1), T(16), T(16), [True, True, True]), {},
     (T(6, 16), T(16), T(16)), dict(flops=96 * (10 + 2 + 1))),
    # a strided input (a transposed one: strides (1, 6)) is copied to contiguous memory
    # first, read and written once more (input.expect_contiguous())
    ("layer_norm strided", aten.native_layer_norm.default,
     (T(6, 16, stride=(1, 6)), [16], T(16), T(16), 1e-5), {}, (T(6, 16), T(6, 1), T(6, 1)),
     dict(flops=96 * 8, rule="layer_norm[1 copy]",
          bytes_read=F4 * (96 + 16 + 16) + F4 * 96,
          bytes_written=F4 * (96 + 6 + 6) + F4 * 96)),
    # ... and its backward both a strided output gradient and a strided input
    ("layer_norm_backward strided", aten.native_layer_norm_backward.default,
     (T(6, 16, stride=(1, 6)), T(6, 16, stride=(1, 6)), [16], T(6, 1), T(6, 1), T(16), T(16),
      [True, True, True]), {}, (T(6, 16), T(16), T(16)),
     dict(flops=96 * (10 + 2 + 1), rule="layer_norm_backward[2 copies]",
          bytes_read=F4 * (96 + 96 + 6 + 6 + 16 + 16) + F4 * 2 * 96,
          bytes_written=F4 * (96 + 16 + 16) + F4 * 2 * 96)),
    # a size-1 dimension's stride is never used: still contiguous, no copy
    ("layer_norm size-1 stride", aten.native_layer_norm.default,
     (T(1, 6, 16, stride=(7, 16, 1)), [16], T(16), T(16), 1e-5), {},
     (T(1, 6, 16), T(1, 6, 1), T(1, 6, 1)), dict(rule="layer_norm")),
    ("group_norm", aten.native_group_norm.default,
     (T(2, 4, 3, 3), T(4), T(4), 2, 4, 9, 2, 1e-5), {}, (T(2, 4, 3, 3), T(2, 2), T(2, 2)),
     dict(flops=72 * 8)),
    ("group_norm_backward", aten.native_group_norm_backward.default,
     (T(2, 4, 3, 3), T(2, 4, 3, 3), T(2, 2), T(2, 2), T(4), 2, 4, 9, 2, [True, False, False]),
     {}, (T(2, 4, 3, 3), None, None), dict(flops=72 * 10)),
    ("rms_norm", aten._fused_rms_norm.default, (T(6, 16), [16], T(16), 1e-6), {},
     (T(6, 16), T(6, 1)), dict(flops=96 * 4)),
    ("rms_norm_backward", aten._fused_rms_norm_backward.default,
     (T(6, 16), T(6, 16), [16], T(6, 1), T(16), [True, True]), {}, (T(6, 16), T(16)),
     dict(flops=96 * (7 + 2))),
    # weight norm of a (4, 6) weight over dim 0: ||v|| per row (square, add), then v * g / ||v||
    ("weight_norm", aten._weight_norm_interface.default, (T(4, 6), T(4, 1), 0), {},
     (T(4, 6), T(4, 1)), dict(flops=24 * (2 + 1), bytes_read=F4 * (24 + 4),
                               bytes_written=F4 * (24 + 4))),
    # grad_g = sum(grad_w * v) / ||v|| (mul, add); grad_v = a * grad_w - b * v (mul, mul, sub)
    ("weight_norm_backward", aten._weight_norm_interface_backward.default,
     (T(4, 6), T(4, 6), T(4, 1), T(4, 1), 0), {}, (T(4, 6), T(4, 1)),
     dict(flops=24 * (2 + 3), bytes_written=F4 * (24 + 4))),
    # max_norm on a (10, 4) table, 6 int64 indices: sort 6 x ceil(log2 6) = 18 comparisons,
    # then at most 6 rows of 4 normed (square, add) and scaled; 6 rows read and written back
    ("embedding_renorm_", aten.embedding_renorm_.default,
     (T(10, 4), T(2, 3, dtype=torch.int64), 1.0, 2.0), {}, T(10, 4),
     dict(flops=6 * 4 * 3 + 18, bytes_read=6 * 8 + 6 * 4 * F4, bytes_written=6 * 4 * F4)),
    # pooling: (2, 3, 8, 8), 3x3 window, stride 2 -> 3x3 outputs... out given explicitly
    ("max_pool2d", aten.max_pool2d_with_indices.default, (T(2, 3, 8, 8), [3, 3], [2, 2]), {},
     (T(2, 3, 3, 3), T(2, 3, 3, 3, dtype=torch.int64)), dict(flops=54 * 9)),
    # Inductor's form: int8 offsets into the window instead of int64 indices, written with
    # the values (54 x 4 + 54 x 1 bytes); the input read once
    ("max_pool_with_offsets", torch.ops.prims._low_memory_max_pool_with_offsets.default,
     (T(2, 3, 8, 8), [3, 3], [2, 2], [0, 0], [1, 1], False), {},
     (T(2, 3, 3, 3), T(2, 3, 3, 3, dtype=torch.int8)),
     dict(flops=54 * 9, bytes_read=384 * 4, bytes_written=54 * 4 + 54)),
    ("max_pool_offsets_to_indices", torch.ops.prims._low_memory_max_pool_offsets_to_indices.default,
     (T(2, 3, 3, 3, dtype=torch.int8), [3, 3], [8, 8], [2, 2], [0, 0], [1, 1]), {},
     T(2, 3, 3, 3, dtype=torch.int64), dict(flops=0, bytes_read=54, bytes_written=54 * 8)),
    ("iota", torch.ops.prims.iota.default, (10,),
     dict(start=0, step=1, dtype=torch.int64, device=torch.device("cpu"), requires_grad=False),
     T(10, dtype=torch.int64), dict(flops=0, bytes_read=0, bytes_written=80)),
    ("max_pool2d_backward", aten.max_pool2d_with_indices_backward.default,
     (T(2, 3, 3, 3), T(2, 3, 8, 8), [3, 3], [2, 2], [0, 0], [1, 1], False,
      T(2, 3, 3, 3, dtype=torch.int64)), {}, T(2, 3, 8, 8),
     dict(flops=54, bytes_read=54 * 4 + 54 * 8, bytes_written=384 * 4)),
    ("avg_pool2d", aten.avg_pool2d.default, (T(2, 3, 8, 8), [2]), {}, T(2, 3, 4, 4),
     dict(flops=96 * 4)),
    ("avg_pool2d_backward", aten.avg_pool2d_backward.default,
     (T(2, 3, 4, 4), T(2, 3, 8, 8), [2, 2], [2, 2], [0, 0], False, True, None), {},
     T(2, 3, 8, 8), dict(flops=96 * 4, bytes_read=96 * 4)),
    # adaptive 7 -> 3: windows [0,3) [2,5) [4,7) = 3 + 3 + 3 = 9 per dim
    ("adaptive_avg_pool2d", aten._adaptive_avg_pool2d.default, (T(2, 3, 7, 7), [3, 3]), {},
     T(2, 3, 3, 3), dict(flops=6 * 9 * 9)),
    # adaptive 5 -> 2: windows [0,3) [2,5) = 6 per dim
    ("adaptive_avg_pool2d_backward", aten._adaptive_avg_pool2d_backward.default,
     (T(2, 3, 2, 2), T(2, 3, 5, 5)), {}, T(2, 3, 5, 5), dict(flops=6 * 6 * 6)),
    ("adaptive_max_pool2d_backward", aten.adaptive_max_pool2d_backward.default,
     (T(2, 3, 2, 2), T(2, 3, 5, 5), T(2, 3, 2, 2, dtype=torch.int64)), {}, T(2, 3, 5, 5),
     dict(flops=24)),
    # interpolation (2, 3, 4, 4) -> (2, 3, 8, 8): 384 outputs; taps 1 / 4 / 16
    ("upsample_nearest2d", aten.upsample_nearest2d.vec, (T(2, 3, 4, 4), [8, 8], None), {},
     T(2, 3, 8, 8), dict(flops=0, bytes_read=96 * F4, bytes_written=384 * F4)),
    ("upsample_bilinear2d", aten.upsample_bilinear2d.vec, (T(2, 3, 4, 4), [8, 8], False, None),
     {}, T(2, 3, 8, 8), dict(flops=384 * (4 + 3))),
    ("upsample_bicubic2d", aten.upsample_bicubic2d.default, (T(2, 3, 4, 4), [8, 8], False), {},
     T(2, 3, 8, 8), dict(flops=384 * (16 + 15))),
    ("upsample_bilinear2d_backward", aten.upsample_bilinear2d_backward.default,
     (T(2, 3, 8, 8), [8, 8], [2, 3, 4, 4], False), {}, T(2, 3, 4, 4),
     dict(flops=384 * 4 * 2, bytes_read=384 * F4, bytes_written=96 * F4)),
    ("upsample_nearest2d_backward", aten.upsample_nearest2d_backward.default,
     (T(2, 3, 8, 8), [8, 8], [2, 3, 4, 4]), {}, T(2, 3, 4, 4), dict(flops=384)),
    # softmax family on 6x10
    ("softmax", aten._softmax.default, (T(6, 10), -1, False), {}, T(6, 10), dict(flops=300)),
    ("softmax_backward", aten._softmax_backward_data.default,
     (T(6, 10), T(6, 10), -1, torch.float32), {}, T(6, 10), dict(flops=240)),
    ("gelu", aten.gelu.default, (T(6, 10),), {}, T(6, 10), dict(flops=60 * 5)),
    ("gelu tanh", aten.gelu.default, (T(6, 10),), {"approximate": "tanh"}, T(6, 10),
     dict(flops=60 * 9)),
    ("gelu_backward", aten.gelu_backward.default, (T(6, 10), T(6, 10)), {}, T(6, 10),
     dict(flops=60 * 11)),
    ("dropout train", aten.native_dropout.default, (T(6, 10), 0.5, True), {},
     (T(6, 10), T(6, 10, dtype=torch.bool)),
     dict(flops=60 * 3, bytes_read=240, bytes_written=240 + 60)),
    # data movement
    ("view", aten.view.default, (T(6, 10), [60]), {}, T(60),
     dict(flops=0, bytes_read=0, bytes_written=0)),
    ("transpose (schema view)", aten.transpose.int, (T(6, 10), 0, 1), {},
     T(10, 6, stride=(1, 10)), dict(flops=0, bytes_read=0, bytes_written=0)),
    ("empty", aten.empty.memory_format, ([6, 10],), {}, T(6, 10),
     dict(bytes_read=0, bytes_written=0)),
    ("zeros", aten.zeros.default, ([6, 10],), {}, T(6, 10), dict(bytes_read=0, bytes_written=240)),
    # a copy laid out unlike its source runs ATen's strided loop: the rule names it
    ("clone of a transposed view", aten.clone.default, (T(10, 6, stride=(1, 10)),), {},
     T(10, 6), dict(flops=0, bytes_read=240, bytes_written=240, rule="copy[strided]")),
    ("clone of a dense view", aten.clone.default, (T(10, 6),), {}, T(10, 6),
     dict(flops=0, bytes_read=240, bytes_written=240, rule="copy")),
    # a dtype change alone is the plain copy: the kernel converts as it streams
    ("to bf16", aten._to_copy.default, (T(6, 10),), {"dtype": torch.bfloat16},
     T(6, 10, dtype=torch.bfloat16),
     dict(flops=0, bytes_read=240, bytes_written=120, rule="copy")),
    ("to bf16, permuted and kept so", aten._to_copy.default, (T(6, 10, stride=(1, 6)),),
     {"dtype": torch.bfloat16}, T(6, 10, dtype=torch.bfloat16, stride=(1, 6)),
     dict(flops=0, bytes_read=240, bytes_written=120, rule="copy")),
    ("cat", aten.cat.default, ([T(6, 10), T(4, 10)],), {}, T(10, 10),
     dict(bytes_read=400, bytes_written=400)),
    ("copy_", aten.copy_.default, (T(6, 10), T(6, 10, dtype=torch.float16)), {}, T(6, 10),
     dict(bytes_read=120, bytes_written=240)),
    ("copy_ from a transposed view", aten.copy_.default, (T(6, 10), T(6, 10, stride=(1, 6))),
     {}, T(6, 10), dict(bytes_read=240, bytes_written=240, rule="copy_into[strided]")),
    # gathers read the indices and the gathered rows only, never the whole table
    ("embedding", aten.embedding.default, (T(1000, 16), T(2, 5, dtype=torch.int64)), {},
     T(2, 5, 16), dict(flops=0, bytes_read=10 * 8 + 160 * 4, bytes_written=160 * 4)),
    ("embedding_backward", aten.embedding_dense_backward.default,
     (T(2, 5, 16), T(2, 5, dtype=torch.int64), 1000, -1, False), {}, T(1000, 16),
     dict(flops=160, bytes_read=160 * 4 + 80, bytes_written=16000 * 4)),
    ("index", aten.index.Tensor, (T(100, 16), [T(7, dtype=torch.int64)]), {}, T(7, 16),
     dict(bytes_read=56 + 7 * 16 * 4, bytes_written=7 * 16 * 4)),
    ("gather", aten.gather.default, (T(100, 16), 0, T(3, 16, dtype=torch.int64)), {}, T(3, 16),
     dict(bytes_read=48 * 8 + 48 * 4, bytes_written=48 * 4)),
    ("index_put accumulate", aten.index_put.default,
     (T(100, 16), [T(7, dtype=torch.int64)], T(7, 16), True), {}, T(100, 16),
     dict(flops=112, bytes_read=56 + 112 * 4 + 1600 * 4, bytes_written=1600 * 4)),
    ("index_put_ in place", aten.index_put_.default,
     (T(100, 16), [T(7, dtype=torch.int64)], T(7, 16)), {}, T(100, 16),
     dict(flops=0, bytes_read=56 + 112 * 4, bytes_written=112 * 4)),
    ("scatter_add", aten.scatter_add.default,
     (T(10, 16), 0, T(3, 16, dtype=torch.int64), T(3, 16)), {}, T(10, 16),
     dict(flops=48, bytes_read=48 * 8 + 48 * 4 + 160 * 4, bytes_written=160 * 4)),
    ("scatter value", aten.scatter.value, (T(10, 16), 0, T(3, 16, dtype=torch.int64), 1.0), {},
     T(10, 16), dict(flops=0, bytes_read=48 * 8 + 160 * 4, bytes_written=160 * 4)),
    ("select_backward", aten.select_backward.default, (T(6, 10), [4, 6, 10], 0, 1), {},
     T(4, 6, 10), dict(bytes_read=240, bytes_written=960)),
]



# ---- cases for the op families added with the OpInfo sweep, each value derived by hand ----
X = T(6, 10)  # 60 elements, 6 rows of 10
L64 = dict(dtype=torch.int64)
CASES += [
    # losses (N = 60 terms; mean adds N, sum N - 1)
    ("mse_loss mean", aten.mse_loss.default, (X, X, 1), {}, T(), dict(flops=2 * 60 + 60)),
    ("mse_loss sum", aten.mse_loss.default, (X, X, 2), {}, T(), dict(flops=2 * 60 + 59)),
    ("mse_loss none", aten.mse_loss.default, (X, X, 0), {}, X, dict(flops=2 * 60)),
    ("mse_loss_backward", aten.mse_loss_backward.default, (T(), X, X, 1), {}, X,
     dict(flops=3 * 60)),
    ("huber_loss", aten.huber_loss.default, (X, X, 1, 1.0), {}, T(), dict(flops=5 * 60 + 60)),
    ("huber_loss_backward", aten.huber_loss_backward.default, (T(), X, X, 1, 1.0), {}, X,
     dict(flops=4 * 60)),
    ("smooth_l1_loss sum", aten.smooth_l1_loss.default, (X, X, 2, 1.0), {}, T(),
     dict(flops=5 * 60 + 59)),
    ("smooth_l1_loss_backward", aten.smooth_l1_loss_backward.default, (T(), X, X, 1, 1.0), {},
     X, dict(flops=4 * 60)),
    ("soft_margin_loss none", aten.soft_margin_loss.default, (X, X, 0), {}, X,
     dict(flops=4 * 60)),
    ("soft_margin_loss_backward", aten.soft_margin_loss_backward.default, (T(), X, X, 1), {},
     X, dict(flops=8 * 60)),
    ("binary_cross_entropy", aten.binary_cross_entropy.default, (X, X, None, 1), {}, T(),
     dict(flops=8 * 60 + 60)),
    ("binary_cross_entropy weighted", aten.binary_cross_entropy.default, (X, X, X, 1), {}, T(),
     dict(flops=9 * 60 + 60)),
    ("binary_cross_entropy_backward", aten.binary_cross_entropy_backward.default,
     (T(), X, X, None, 1), {}, X, dict(flops=6 * 60)),
    ("bce_with_logits pos_weight", aten.binary_cross_entropy_with_logits.default,
     (X, X, None, T(10), 1), {}, T(), dict(flops=(9 + 3) * 60 + 60)),
    # NLL: 6 samples pick one logit each; reads the 6 picked floats and 6 int64 targets
    ("nll_loss", aten.nll_loss_forward.default, (X, T(6, **L64), None, 1, -100), {},
     (T(), T()), dict(flops=6 + 6, bytes_read=6 * 8 + 6 * 4)),
    ("nll_loss_backward", aten.nll_loss_backward.default,
     (T(), X, T(6, **L64), None, 1, -100, T()), {}, X,
     dict(flops=6, bytes_read=4 + 6 * 8, bytes_written=240)),
    ("nll_loss2d sum", aten.nll_loss2d_forward.default,
     (T(2, 5, 3, 3), T(2, 3, 3, **L64), None, 2, -100), {}, (T(), T()), dict(flops=18 + 17)),
    ("nll_loss2d_backward", aten.nll_loss2d_backward.default,
     (T(), T(2, 5, 3, 3), T(2, 3, 3, **L64), None, 1, -100, T()), {}, T(2, 5, 3, 3),
     dict(flops=18)),
    ("multi_margin_loss", aten.multi_margin_loss.default, (X, T(6, **L64), 1, 1, None, 1), {},
     T(), dict(flops=4 * 60 + 6 + 6)),
    ("multi_margin_loss p=2", aten.multi_margin_loss.default, (X, T(6, **L64), 2, 1, None, 1),
     {}, T(), dict(flops=5 * 60 + 6 + 6)),
    ("multi_margin_loss_backward", aten.multi_margin_loss_backward.default,
     (T(), X, T(6, **L64), 1, 1, None, 1), {}, X, dict(flops=3 * 60)),
    # 6 samples x 10 classes: 100 (target, other) pairs each
    ("multilabel_margin_loss", aten.multilabel_margin_loss_forward.default,
     (X, T(6, 10, **L64), 1), {}, (T(), X), dict(flops=3 * 600 + 6 + 6)),
    ("multilabel_margin_loss_backward", aten.multilabel_margin_loss_backward.default,
     (T(), X, T(6, 10, **L64), 1, X), {}, X, dict(flops=3 * 600)),
    # RNNs. LSTM layer: T=3, B=2 (6 rows), I=6, H=5, 4 gates: MACs 6 * (20*6 + 20*5) = 1320;
    # FLOPs 2*1320 + 6*20*(1 + 2 biases) + 6*5*18 (cell) = 3540
    ("mkldnn_rnn_layer", aten.mkldnn_rnn_layer.default,
     (T(3, 2, 6), T(20, 6), T(20, 5), T(20), T(20), T(2, 5), T(2, 5), False, [], 2, 5, 1, True,
      False, True, True), {}, (T(3, 2, 5), T(2, 5), T(2, 5), T(0)),
     dict(macs=1320, flops=3540)),
    # backward: twice the MACs; 4*1320 + 6*5*22 (cell) + 6*20 (bias grad) = 6060
    ("mkldnn_rnn_layer_backward", aten.mkldnn_rnn_layer_backward.default,
     (T(3, 2, 6), T(20, 6), T(20, 5), T(20), T(20), T(2, 5), T(2, 5), T(3, 2, 5), T(2, 5),
      T(2, 5), T(3, 2, 5), T(2, 5), T(2, 5), False, 2, 5, 1, True, True, False, [], True, T(0)),
     {}, (T(3, 2, 6), T(20, 6), T(20, 5), T(20), T(20), T(2, 5), T(2, 5)),
     dict(macs=2640, flops=6060)),
    # cuDNN GRU, 2 layers, biases: 8 rows; layer 0 MACs 8*(15*6 + 15*5) = 1320, layer 1
    # 8*(75 + 75) = 1200; FLOPs 2*2520 + 2 * (8*15*3 + 8*5*15) = 6960
    ("_cudnn_rnn GRU", aten._cudnn_rnn.default,
     (T(4, 2, 6), [T(15, 6), T(15, 5), T(15), T(15), T(15, 5), T(15, 5), T(15), T(15)], 4,
      None, T(2, 2, 5), None, 3, 5, 0, 2, False, 0.0, True, False, [], None), {},
     (T(4, 2, 5), T(2, 2, 5), T(0), T(0), T(0)), dict(macs=2520, flops=6960)),
    # backward: 4*2520 + 2 * (8*5*16 + 8*15) = 11600
    ("_cudnn_rnn_backward GRU", aten._cudnn_rnn_backward.default,
     (T(4, 2, 6), [T(15, 6), T(15, 5), T(15), T(15), T(15, 5), T(15, 5), T(15), T(15)], 4,
      T(0), T(2, 2, 5), None, T(4, 2, 5), T(4, 2, 5), None, None, 3, 5, 0, 2, False, 0.0, True,
      False, [], None, T(0), [True, True, True, False]), {},
     (T(4, 2, 6), T(2, 2, 5), T(0), []), dict(macs=5040, flops=11600)),
    # MIOpen LSTM without biases: 6 rows, MACs 1320; 2640 + 6*20 + 6*5*18 = 3300
    ("miopen_rnn", aten.miopen_rnn.default,
     (T(3, 2, 6), [T(20, 6), T(20, 5)], 2, T(1, 2, 5), T(1, 2, 5), 2, 5, 1, False, 0.0, True,
      False, [], None), {}, (T(3, 2, 5),) * 5, dict(macs=1320, flops=3300)),
    ("miopen_rnn_backward", aten.miopen_rnn_backward.default,
     (T(3, 2, 6), [T(20, 6), T(20, 5)], 2, T(0), T(1, 2, 5), T(1, 2, 5), T(3, 2, 5),
      T(3, 2, 5), None, None, 2, 5, 1, False, 0.0, True, False, [], None, T(0),
      [True, True, True, True]), {}, (T(3, 2, 6), T(1, 2, 5), T(1, 2, 5), []),
     dict(macs=2640, flops=4 * 1320 + 6 * 5 * 22)),
    # fused cells (the projections are separate mm ops): B=2, H=5
    ("_thnn_fused_lstm_cell", aten._thnn_fused_lstm_cell.default,
     (T(2, 20), T(2, 20), T(2, 5), T(20), T(20)), {}, (T(2, 5), T(2, 5), T(2, 20)),
     dict(flops=40 * 3 + 10 * 18)),
    ("_thnn_fused_lstm_cell_backward", aten._thnn_fused_lstm_cell_backward_impl.default,
     (T(2, 5), T(2, 5), T(2, 5), T(2, 5), T(2, 20), True), {}, (T(2, 20), T(2, 5), T(20)),
     dict(flops=10 * 22 + 40)),
    ("_thnn_fused_gru_cell", aten._thnn_fused_gru_cell.default,
     (T(2, 15), T(2, 15), T(2, 5), T(15), T(15)), {}, (T(2, 5), T(2, 25)),
     dict(flops=30 * 3 + 10 * 15)),
    ("_thnn_fused_gru_cell_backward", aten._thnn_fused_gru_cell_backward.default,
     (T(2, 5), T(2, 25), True), {}, (T(2, 15),) * 5, dict(flops=10 * 16 + 30)),
    # scans along dim 1 of (6, 10): 6 rows of 9 steps
    ("cumsum", aten.cumsum.default, (X, 1), {}, X, dict(flops=54)),
    ("cummax", aten.cummax.default, (X, 1), {}, (X, T(6, 10, **L64)), dict(flops=54)),
    ("logcumsumexp", aten.logcumsumexp.default, (X, 1), {}, X, dict(flops=5 * 54)),
    ("trace", aten.trace.default, (T(4, 6),), {}, T(), dict(flops=3, bytes_read=16)),
    ("renorm", aten.renorm.default, (X, 2, 0, 1.0), {}, X, dict(flops=180)),
    # sorting and selection: comparisons
    ("sort", aten.sort.default, (X, -1), {}, (X, T(6, 10, **L64)), dict(flops=6 * 10 * 4)),
    ("sort stable dim 0", aten.sort.stable, (X,), {"stable": True, "dim": 0},
     (X, T(6, 10, **L64)), dict(flops=10 * 6 * 3)),
    ("topk", aten.topk.default, (X, 3), {}, (T(6, 3), T(6, 3, **L64)), dict(flops=6 * 10 * 2)),
    ("kthvalue", aten.kthvalue.default, (X, 2, 1), {}, (T(6), T(6, **L64)), dict(flops=120)),
    ("median", aten.median.default, (X,), {}, T(), dict(flops=120)),
    ("mode", aten.mode.default, (X, 1), {}, (T(6), T(6, **L64)), dict(flops=6 * 10 * 5)),
    ("bucketize", aten.bucketize.Tensor, (X, T(7)), {}, T(6, 10, **L64), dict(flops=60 * 3)),
    ("searchsorted", aten.searchsorted.Tensor, (T(7), X), {}, T(6, 10, **L64),
     dict(flops=60 * 3)),
    ("isin", aten.isin.Tensor_Tensor, (X, T(8)), {}, T(6, 10, dtype=torch.bool),
     dict(flops=8 * 3 + 60 * 4)),
    ("histc", aten.histc.default, (X, 10, 0.0, 1.0), {}, T(10), dict(flops=240)),
    ("histogramdd_bin_edges", aten._histogramdd_bin_edges.default, (T(6, 2), [3, 3]), {},
     [T(4), T(4)], dict(flops=24)),
    ("segment_reduce", aten.segment_reduce.default, (T(10), "sum"), {"lengths": T(3, **L64)},
     T(3), dict(flops=10)),
    ("segment_reduce_backward", aten._segment_reduce_backward.default,
     (T(3), T(3), T(10), "sum"), {"lengths": T(3, **L64)}, T(10), dict(flops=10)),
    # linear algebra on a batch of 2 4x4 matrices (n = 4): LU 2n^3/3 = 42.67 each
    ("lu_factor", aten.linalg_lu_factor_ex.default, (T(2, 4, 4),), {},
     (T(2, 4, 4), T(2, 4, dtype=torch.int32), T(2, dtype=torch.int32)), dict(flops=85)),
    ("cholesky", aten.linalg_cholesky_ex.default, (T(2, 4, 4),), {}, (T(2, 4, 4), T(2)),
     dict(flops=43)),
    ("inv", aten.linalg_inv_ex.default, (T(2, 4, 4),), {}, (T(2, 4, 4), T(2)),
     dict(flops=2 * 2 * 64)),
    ("cholesky_inverse", aten.cholesky_inverse.default, (T(4, 4),), {}, T(4, 4),
     dict(flops=43)),
    ("det", aten._linalg_det.default, (T(2, 4, 4),), {}, (T(2), T(2, 4, 4), T(2, 4)),
     dict(flops=93)),  # 2 * (42.67 + 4)
    ("geqrf 6x4", aten.geqrf.default, (T(6, 4),), {}, (T(6, 4), T(4)), dict(flops=149)),
    ("qr reduced 6x4", aten.linalg_qr.default, (T(6, 4),), {}, (T(6, 4), T(4, 4)),
     dict(flops=299)),  # geqrf 149.33 + orgqr 384 - 320 + 85.33
    ("qr r only", aten.linalg_qr.default, (T(6, 4), "r"), {}, (T(0), T(4, 4)),
     dict(flops=149)),
    ("householder_product", aten.linalg_householder_product.default, (T(6, 4), T(4)), {},
     T(6, 4), dict(flops=149)),
    ("ormqr", aten.ormqr.default, (T(6, 4), T(4), T(6, 3)), {}, T(6, 3),
     dict(flops=4 * 6 * 3 * 4 - 2 * 3 * 16)),
    ("svd 6x4", aten._linalg_svd.default, (T(6, 4),), {}, (T(6, 4), T(4), T(4, 4)),
     dict(flops=6 * 6 * 16 + 20 * 64)),
    ("svd values", aten._linalg_svd.default, (T(6, 4), False, False), {}, (T(0), T(4), T(0)),
     dict(flops=299)),  # 4*6*16 - 4*64/3
    ("pinv", aten.linalg_pinv.atol_rtol_tensor, (T(6, 4),), {}, T(4, 6),
     dict(flops=1856 + 2 * 6 * 16)),
    ("eigh", aten._linalg_eigh.default, (T(4, 4),), {}, (T(4), T(4, 4)), dict(flops=9 * 64)),
    ("eigvalsh", aten._linalg_eigh.default, (T(4, 4), "L", False), {}, (T(4), T(0)),
     dict(flops=85)),
    ("eig", aten.linalg_eig.default, (T(4, 4),), {},
     (T(4, dtype=torch.complex64), T(4, 4, dtype=torch.complex64)), dict(flops=25 * 64)),
    ("solve", aten._linalg_solve_ex.default, (T(4, 4), T(4, 3)), {},
     (T(4, 3), T(4, 4), T(4, dtype=torch.int32), T()), dict(flops=139)),  # 42.67 + 2*16*3
    ("lu_solve", aten.linalg_lu_solve.default, (T(4, 4), T(4, dtype=torch.int32), T(4, 3)), {},
     T(4, 3), dict(flops=2 * 16 * 3)),
    ("solve_triangular", aten.linalg_solve_triangular.default, (T(4, 4), T(4, 3)),
     {"upper": True}, T(4, 3), dict(flops=16 * 3)),
    ("cross", aten.linalg_cross.default, (T(5, 3), T(5, 3)), {}, T(5, 3), dict(flops=45)),
    ("matrix_exp", aten.linalg_matrix_exp.default, (T(4, 4),), {}, T(4, 4),
     dict(flops=939)),  # 6 * 128 + 42.67 + 128
    # FFT: 8 transforms of length 16: 5 * 16 * log2(16) each; real halves it
    ("fft c2c", aten._fft_c2c.default, (T(8, 16, dtype=torch.complex64), [1], 0, True), {},
     T(8, 16, dtype=torch.complex64), dict(flops=8 * 5 * 16 * 4)),
    ("fft r2c", aten._fft_r2c.default, (T(8, 16), [1], 0, True), {},
     T(8, 9, dtype=torch.complex64), dict(flops=8 * 5 * 16 * 4 // 2)),
    ("fft c2r", aten._fft_c2r.default, (T(8, 9, dtype=torch.complex64), [1], 0, 16), {},
     T(8, 16), dict(flops=8 * 5 * 16 * 4 // 2)),
    # attention kernels under SDPA: (B=2, L=4, H=3, E=8) q, S=6 keys: 144 pairs, 60 causal
    ("flash forward causal", aten._flash_attention_forward.default,
     (T(2, 4, 3, 8), T(2, 6, 3, 8), T(2, 6, 3, 8), None, None, 4, 6, 0.0, True, False), {},
     (T(2, 4, 3, 8), T(2, 3, 4), T(2), T(0), T(0)), dict(macs=60 * 16)),
    ("flash backward", aten._flash_attention_backward.default,
     (T(2, 4, 3, 8), T(2, 4, 3, 8), T(2, 6, 3, 8), T(2, 6, 3, 8), T(2, 4, 3, 8), T(2, 3, 4),
      None, None, 4, 6, 0.0, False, T(2), T(0)), {}, (T(2, 4, 3, 8),) * 3,
     dict(macs=144 * 40)),
    ("efficient forward", aten._efficient_attention_forward.default,
     (T(2, 4, 3, 8), T(2, 6, 3, 8), T(2, 6, 3, 8), None, None, None, 4, 6, 0.0, 0), {},
     (T(2, 4, 3, 8), T(2, 3, 4), T(), T(), 4, 6), dict(macs=144 * 16, flops=144 * 38)),
    ("efficient backward causal", aten._efficient_attention_backward.default,
     (T(2, 4, 3, 8), T(2, 4, 3, 8), T(2, 6, 3, 8), T(2, 6, 3, 8), None, T(2, 4, 3, 8), None,
      None, 4, 6, T(2, 3, 4), 0.0, T(), T(), 1, False), {}, (T(2, 4, 3, 8),) * 3 + (T(0),),
     dict(macs=60 * 40)),
    ("cudnn attention forward", aten._cudnn_attention_forward.default,
     (T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 8), None, None, None, 4, 6, True), {},
     (T(2, 3, 4, 8),), dict(macs=144 * 16)),
    ("cudnn attention backward causal", aten._cudnn_attention_backward.default,
     (T(2, 3, 4, 8), T(2, 3, 4, 8), T(2, 3, 6, 8), T(2, 3, 6, 8), T(2, 3, 4, 8), T(2, 3, 4),
      T(), T(), None, None, None, 4, 6, 0.0, True), {}, (T(2, 3, 4, 8),) * 3,
     dict(macs=60 * 40)),
    # distances: 2 batches of 5 x 7 pairs over 4 features
    ("cdist", aten._cdist_forward.default, (T(2, 5, 4), T(2, 7, 4), 2.0, None), {},
     T(2, 5, 7), dict(flops=3 * 70 * 4)),
    ("cdist_backward", aten._cdist_backward.default,
     (T(2, 5, 7), T(2, 5, 4), T(2, 7, 4), 2.0, T(2, 5, 7)), {}, T(2, 5, 4),
     dict(flops=4 * 70 * 4)),
    ("pdist", aten._pdist_forward.default, (T(5, 4),), {}, T(10), dict(flops=3 * 10 * 4)),
    ("pdist_backward", aten._pdist_backward.default, (T(10), T(5, 4), 2.0, T(10)), {},
     T(5, 4), dict(flops=4 * 10 * 4)),
    # nn.Bilinear's trilinear product: x1 (3, 4), W (5, 4, 6), x2 (3, 6) -> (3, 5, 4, 6) terms
    ("trilinear", aten._trilinear.default,
     (T(3, 4), T(5, 4, 6), T(3, 6), [1, 3], [0], [1, 2], [2, 3]), {}, T(3, 5),
     dict(flops=3 * 360, macs=360)),
    # embedding_bag: 12 indices into a (100, 16) table, 4 bags
    ("embedding_bag mean", aten._embedding_bag.default,
     (T(100, 16), T(12, **L64), T(4, **L64), False, 1), {},
     (T(4, 16), T(12, **L64), T(4, **L64), T(4, **L64)),
     dict(flops=192 + 64, bytes_read=96 + 32 + 192 * 4)),
    ("embedding_bag weighted", aten._embedding_bag_forward_only.default,
     (T(100, 16), T(12, **L64), T(4, **L64), False, 0, False, T(12)), {},
     (T(4, 16), T(12, **L64), T(4, **L64), T(4, **L64)),
     dict(flops=2 * 192, bytes_read=96 + 32 + 192 * 4 + 48)),
    ("embedding_bag_backward", aten._embedding_bag_backward.default,
     (T(4, 16), T(12, **L64), T(4, **L64), T(12, **L64), T(4, **L64), T(4, **L64), 100, False,
      0, False, None), {}, T(100, 16),
     dict(flops=192, bytes_read=256 + 96, bytes_written=6400)),
    ("embedding_bag per-sample-weights backward",
     aten._embedding_bag_per_sample_weights_backward.default,
     (T(4, 16), T(100, 16), T(12, **L64), T(4, **L64), T(12, **L64), 0), {}, T(12),
     dict(flops=2 * 192, bytes_read=256 + 96 + 768)),
    ("multinomial", aten.multinomial.default, (T(4, 10), 3), {}, T(4, 3, **L64),
     dict(flops=4 * 9 + 12 * 4)),
    # grid_sample: 2 x 5 x 5 grid points, 3 channels -> 150 outputs; bilinear 4 taps
    ("grid_sampler_2d bilinear", aten.grid_sampler_2d.default,
     (T(2, 3, 8, 8), T(2, 5, 5, 2), 0, 0, False), {}, T(2, 3, 5, 5),
     dict(flops=150 * 7 + 50 * (4 + 4))),
    ("grid_sampler_2d nearest", aten.grid_sampler_2d.default,
     (T(2, 3, 8, 8), T(2, 5, 5, 2), 1, 0, False), {}, T(2, 3, 5, 5), dict(flops=50 * 5)),
    ("grid_sampler_2d_backward", aten.grid_sampler_2d_backward.default,
     (T(2, 3, 5, 5), T(2, 3, 8, 8), T(2, 5, 5, 2), 0, 0, False, [True, True]), {},
     (T(2, 3, 8, 8), T(2, 5, 5, 2)), dict(flops=150 * 8 * 3)),
    ("grid_sampler_3d trilinear", aten.grid_sampler_3d.default,
     (T(1, 2, 4, 4, 4), T(1, 3, 3, 3, 3), 0, 0, False), {}, T(1, 2, 3, 3, 3),
     dict(flops=54 * 15 + 27 * (6 + 8))),
    ("grid_sampler_3d_backward input only", aten.grid_sampler_3d_backward.default,
     (T(1, 2, 3, 3, 3), T(1, 2, 4, 4, 4), T(1, 3, 3, 3, 3), 0, 0, False, [True, False]), {},
     (T(1, 2, 4, 4, 4), None), dict(flops=54 * 16)),
    # antialiased 8x8 -> 4x4 (2 planes): 4 taps per dim; horizontal pass writes 2*8*4
    ("upsample_bilinear2d_aa", aten._upsample_bilinear2d_aa.default,
     (T(1, 2, 8, 8), [4, 4], False), {}, T(1, 2, 4, 4), dict(flops=64 * 7 + 32 * 7)),
    ("upsample_bilinear2d_aa_backward", aten._upsample_bilinear2d_aa_backward.default,
     (T(1, 2, 4, 4), [4, 4], [1, 2, 8, 8], False), {}, T(1, 2, 8, 8),
     dict(flops=32 * 8 + 64 * 8)),
    # antialiased bicubic 8x8 -> 4x4: the cubic filter (width 4) at scale 2 spans 8 taps a dim
    ("upsample_bicubic2d_aa", aten._upsample_bicubic2d_aa.default,
     (T(1, 2, 8, 8), [4, 4], False), {}, T(1, 2, 4, 4), dict(flops=64 * 15 + 32 * 15)),
    ("upsample_bicubic2d_aa_backward", aten._upsample_bicubic2d_aa_backward.default,
     (T(1, 2, 4, 4), [4, 4], [1, 2, 8, 8], False), {}, T(1, 2, 8, 8),
     dict(flops=32 * 16 + 64 * 16)),
    # affine_grid of 2 samples at 5x6: 60 points of (x, y, 1) times theta's two rows of 3;
    # the (60, 3) base grid is written and read back
    ("affine_grid_generator", aten.affine_grid_generator.default,
     (T(2, 2, 3), [2, 3, 5, 6], False), {}, T(2, 5, 6, 2),
     dict(flops=60 * 2 * (2 * 3), bytes_read=F4 * (2 * 6 + 60 * 3),
          bytes_written=F4 * (60 * 2 + 60 * 3))),
    # window factories: their formula per point of the N = 64 they write, reading nothing
    ("hann_window", aten.hann_window.default, (64,), {}, T(64),
     dict(flops=64 * 4, bytes_read=0, bytes_written=64 * F4)),
    ("hamming_window", aten.hamming_window.periodic_alpha_beta, (64, True, 0.54, 0.46), {},
     T(64), dict(flops=64 * 4)),
    ("blackman_window", aten.blackman_window.default, (64,), {}, T(64), dict(flops=64 * 9)),
    ("bartlett_window", aten.bartlett_window.default, (64,), {}, T(64), dict(flops=64 * 2)),
    ("kaiser_window", aten.kaiser_window.default, (64,), {}, T(64), dict(flops=64 * 8)),
    ("fractional_max_pool2d", aten.fractional_max_pool2d.default,
     (T(2, 3, 8, 8), [2, 2], [4, 4], T(2, 3, 2)), {}, (T(2, 3, 4, 4), T(2, 3, 4, 4, **L64)),
     dict(flops=96 * 4)),
    ("fractional_max_pool2d_backward", aten.fractional_max_pool2d_backward.default,
     (T(2, 3, 4, 4), T(2, 3, 8, 8), [2, 2], [4, 4], T(2, 3, 4, 4, **L64)), {}, T(2, 3, 8, 8),
     dict(flops=96, bytes_read=96 * 4 + 96 * 8)),
    ("fractional_max_pool3d", aten.fractional_max_pool3d.default,
     (T(1, 2, 4, 4, 4), [2, 2, 2], [2, 2, 2], T(1, 2, 3)), {},
     (T(1, 2, 2, 2, 2), T(1, 2, 2, 2, 2, **L64)), dict(flops=16 * 8)),
    ("fractional_max_pool3d_backward", aten.fractional_max_pool3d_backward.default,
     (T(1, 2, 2, 2, 2), T(1, 2, 4, 4, 4), [2, 2, 2], [2, 2, 2], T(1, 2, 2, 2, 2, **L64)), {},
     T(1, 2, 4, 4, 4), dict(flops=16)),
    # data movement
    ("take", aten.take.default, (T(100), T(7, **L64)), {}, T(7),
     dict(flops=0, bytes_read=56 + 28, bytes_written=28)),
    ("put", aten.put.default, (T(100), T(7, **L64), T(7)), {}, T(100),
     dict(bytes_read=56 + 28 + 400, bytes_written=400)),
    ("masked_index_put_accumulate", aten._unsafe_masked_index_put_accumulate.default,
     (T(100), T(7, dtype=torch.bool), [T(7, **L64)], T(7)), {}, T(100),
     dict(flops=7, bytes_read=7 + 56 + 28 + 400, bytes_written=400)),
    ("index_fill", aten.index_fill.int_Scalar, (X, 0, T(2, **L64), 1.0), {}, X,
     dict(flops=0, bytes_read=240 + 16, bytes_written=240)),
    ("index_reduce", aten.index_reduce.default, (X, 0, T(3, **L64), T(3, 10), "prod"), {}, X,
     dict(flops=30, bytes_read=24 + 120 + 240, bytes_written=240)),
    ("max_unpool2d", aten.max_unpool2d.default, (T(1, 2, 3, 3), T(1, 2, 3, 3, **L64), [6, 6]),
     {}, T(1, 2, 6, 6), dict(bytes_read=72 + 144, bytes_written=288)),
    ("reflection_pad2d_backward", aten.reflection_pad2d_backward.default,
     (T(1, 2, 6, 6), T(1, 2, 4, 4), [1, 1, 1, 1]), {}, T(1, 2, 4, 4),
     dict(flops=72, bytes_read=288, bytes_written=128)),
    ("permute_copy (view_copy tag)", aten.permute_copy.default, (X, [1, 0]), {}, T(10, 6),
     dict(flops=0, bytes_read=240, bytes_written=240)),
    ("transpose_ (inplace_view tag)", aten.transpose_.default, (X, 0, 1), {}, T(10, 6),
     dict(flops=0, bytes_read=0, bytes_written=0)),
    ("unsafe_split", aten.unsafe_split.Tensor, (X, 2), {}, (T(2, 10),) * 3,
     dict(flops=0, bytes_read=0, bytes_written=0)),
    ("logspace", aten.logspace.default, (0.0, 1.0, 10), {}, T(10),
     dict(bytes_read=0, bytes_written=40)),
    ("mish_backward", aten.mish_backward.default, (X, X), {}, X, dict(flops=13 * 60)),
    # ops newer than torch 2.11 (op_costs.registry.newer_aten_ops): cases where they exist
    *([("matrix_sqrth", aten.linalg_matrix_sqrth.default, (T(4, 4),), {}, T(4, 4),
        dict(flops=11 * 64 + 16 + 4))] if hasattr(aten, "linalg_matrix_sqrth") else []),
    # polar of 4x4: SVD 6*4*16 + 20*64 = 1664, U 2*64, H 16 + 2*64
    *([("polar decomposition", aten.linalg_polar.default, (T(4, 4),), {},
        (T(4, 4), T(4, 4)), dict(flops=1664 + 128 + 16 + 128))]
      if hasattr(aten, "linalg_polar") else []),
    # (5, 4) to (7, 4): 140 MACs; norms 2 * 12 * 4; 4 per pair
    ("_euclidean_dist", aten._euclidean_dist.default, (T(5, 4), T(7, 4)), {}, T(5, 7),
     dict(macs=140, flops=280 + 96 + 140)),
    ("repeat_interleave", aten.repeat_interleave.self_int, (X, 2, 0), {}, T(12, 10),
     dict(flops=0, bytes_read=240, bytes_written=480)),
    # pointwise without a plain weight
    ("glu", aten.glu.default, (X, -1), {}, T(6, 5), dict(flops=30 * 5)),
    ("glu_backward", aten.glu_backward.default, (T(6, 5), X, -1), {}, X, dict(flops=30 * 9)),
    ("log_sigmoid_forward", aten.log_sigmoid_forward.default, (X,), {}, (X, T(0)),
     dict(flops=60 * 5)),
    ("special_i0e (pointwise tag)", aten.special_i0e.default, (X,), {}, X, dict(flops=60)),
    # complex elementwise: add = 2 real adds; mul = 4 multiplies + 2 adds
    ("add complex", aten.add.Tensor, (T(6, 10, dtype=torch.complex64),) * 2, {},
     T(6, 10, dtype=torch.complex64), dict(flops=120)),
    ("mul complex", aten.mul.Tensor, (T(6, 10, dtype=torch.complex64),) * 2, {},
     T(6, 10, dtype=torch.complex64), dict(flops=360)),
]


# optimizer kernels over parameter lists PL = [(6, 10), (3, 4)]: PE = 72 elements, 288 bytes
PL = [T(6, 10), T(3, 4)]
PE, PLB = 72, 288
ADAM_KW = dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False,
               maximize=False)
SGD_KW = dict(weight_decay=0.0, momentum=0.9, lr=1e-3, dampening=0.0, nesterov=False,
              maximize=False, is_first_step=False)
CASES += [
    # m lerp 3, v*b2 1, + (1-b2) g g 3, sqrt 1, / sqrt(bc2) 1, + eps 1, p -= s m / d 3 = 13;
    # reads p, g, m, v; writes p, m, v
    ("_fused_adam_", aten._fused_adam_.default, (PL, PL, PL, PL, [], [T(), T()]), ADAM_KW, None,
     dict(flops=13 * PE, bytes_read=4 * PLB, bytes_written=3 * PLB)),
    ("_fused_adamw_ weight decay", aten._fused_adamw_.default,
     (PL, PL, PL, PL, [], [T(), T()]), {**ADAM_KW, "weight_decay": 0.01}, None,
     dict(flops=14 * PE, bytes_read=4 * PLB, bytes_written=3 * PLB)),
    # buf = mu buf + g (2), p -= lr buf (1); reads p, g, buf; writes p, buf
    ("_fused_sgd_", aten._fused_sgd_.default, (PL, PL, PL), SGD_KW, None,
     dict(flops=3 * PE, bytes_read=3 * PLB, bytes_written=2 * PLB)),
    ("_foreach_norm: x*x accumulated", aten._foreach_norm.Scalar, (PL,), {}, [T(), T()],
     dict(flops=2 * PE, bytes_read=PLB)),
    ("_foreach_copy_", aten._foreach_copy_.default, (PL, PL), {}, None,
     dict(flops=0, bytes_read=PLB, bytes_written=PLB)),
    ("_foreach_zero_ (zero_grad set_to_none=False)", aten._foreach_zero_.default, (PL,), {},
     None, dict(flops=0, bytes_read=0, bytes_written=PLB)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_closed_form(case):
    _, op, args, kwargs, out, expected = case
    got = run_case(op, args, kwargs, out)
    for field, value in expected.items():
        assert getattr(got, field) == value, f"{field}: {getattr(got, field)} != {value}"
    assert got.rule != op_costs.DEFAULT_RULE


def test_every_rule_has_a_closed_form_case():
    """A rule without a case here is a rule nobody checked."""
    covered = {op_costs.rule_for(case[1]).name for case in CASES}
    covered |= {r.name for r in op_costs.RULES.values()
                if r.name.startswith(("pointwise[", "reduction[", "foreach["))}  # parametrized

    unchecked = {r.name for r in op_costs.RULES.values()} - covered
    assert not unchecked, f"rules with no closed-form case: {sorted(unchecked)}"


# Written by hand from each op's defining formula -- deliberately not read from
# op_costs.pointwise, so a wrong weight there fails here. (FLOPs per output element.)
EXPECTED_POINTWISE = {
    # one arithmetic op, compare/select or transcendental
    **dict.fromkeys("""add sub rsub mul div neg abs relu exp exp2 expm1 log log2 log10 log1p sqrt
        rsqrt reciprocal sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf erfc
        erfinv floor ceil round trunc frac sign sgn pow maximum minimum fmax fmin clamp_min
        clamp_max remainder fmod atan2 hypot copysign eq ne lt le gt ge logical_not logical_and
        logical_or logical_xor bitwise_not bitwise_and bitwise_or bitwise_xor isnan isinf where
        masked_fill threshold threshold_backward deg2rad rad2deg heaviside nan_to_num signbit
        isposinf isneginf bernoulli complex""".split(), 1),
    "clamp": 2,                    # min then max
    "hardtanh": 2,                 # min then max
    "leaky_relu": 2,               # compare, multiply
    "elu": 4,                      # compare, exp, sub 1, multiply
    "celu": 5,                     # compare, divide by alpha, exp, sub 1, multiply
    "sigmoid": 4,                  # neg, exp, add 1, reciprocal
    "logit": 3,                    # 1 - x, divide, log
    "silu": 5,                     # sigmoid (4), multiply
    "hardsigmoid": 4,              # add 3, max 0, min 6, divide 6
    "hardswish": 5,                # hardsigmoid (4), multiply
    "softplus": 3,                 # exp, add 1, log
    "mish": 5,                     # softplus (3), tanh, multiply
    "addcmul": 3,                  # two multiplies (value, t1*t2), one add
    "addcdiv": 3,                  # divide, multiply by value, add
    "lerp": 3,                     # end - self, times weight, plus self
    "_prelu_kernel": 2,            # compare, multiply
    "xlogy": 2,                    # log, multiply
    "hardtanh_backward": 2,        # in-range test (2 compares folded into 1 select) + select
    "leaky_relu_backward": 2,      # compare, multiply
    "elu_backward": 3,             # compare, add alpha to y, multiply
    "sigmoid_backward": 3,         # 1 - y, times y, times g
    "tanh_backward": 3,            # y*y, 1 - it, times g
    "logit_backward": 4,           # 1 - x, times x, g over it, range select
    "silu_backward": 9,            # sigmoid (4), 1 - s, x*(.), 1 + (.), times s, times g
    "hardsigmoid_backward": 2,     # range test, g / 6
    "hardswish_backward": 4,       # range tests, (2x + 3) / 6 as 3 ops, times g folded: 4
    "softplus_backward": 5,        # sigmoid (4), times g
    "_prelu_kernel_backward": 3,   # select(g, w*g) (2), x*g (1)
    "native_dropout_backward": 2,  # g * mask, times scale
    "logaddexp": 5,                # max, sub, abs-neg, exp, log1p + add (folded)
    "logaddexp2": 5,
    "sinc": 3,                     # pi*x, sin, divide
    "floor_divide": 2,             # divide, floor
    "hardshrink": 2,               # abs-compare, select
    "softshrink": 3,               # compare, shift by lambda, select
    "hardshrink_backward": 2,
    "softshrink_backward": 2,
    "log_sigmoid_backward": 5,     # sigmoid (4), times g after 1 - s
    "rrelu_with_noise": 3,         # sample, compare, multiply
    "rrelu_with_noise_backward": 2,
    "polar": 4,                    # cos, sin, two multiplies
}


@pytest.mark.parametrize("name", sorted(EXPECTED_POINTWISE))
def test_pointwise_weight_times_output_elements(name):
    packet = getattr(aten, name)
    op = getattr(packet, packet.overloads()[0])
    x = T(6, 10)
    got = op_costs.estimate(op, (x, x), {}, x)
    assert got.flops == EXPECTED_POINTWISE[name] * 60
    assert got.rule == f"pointwise[{name}]"


def test_every_weighted_pointwise_op_is_in_the_hand_table():
    registered = {r.name[len("pointwise["):-1] for r in op_costs.RULES.values()
                  if r.name.startswith("pointwise[") and r.name != "pointwise[tagged]"}
    assert registered <= set(EXPECTED_POINTWISE), sorted(registered - set(EXPECTED_POINTWISE))


def test_inplace_variant_costs_like_functional():
    x = T(6, 10)
    inplace = est(aten.relu_.default, x, out=x)
    functional = est(aten.relu.default, x, out=x)
    assert inplace == functional
    assert inplace.flops == 60 and inplace.bytes_read == 240 and inplace.bytes_written == 240
    assert est(aten.add_.Tensor, x, x, out=x).flops == 60


def test_broadcast_operand_read_at_its_real_size():
    # (6, 10) + (10,): 60 adds; reads 60 + 10 elements, writes 60
    got = est(aten.add.Tensor, T(6, 10), T(10), out=T(6, 10))
    assert (got.flops, got.bytes_read, got.bytes_written) == (60, 280, 240)
    # an expanded (stride-0) operand is read once at its underlying size
    expanded = T(6, 10, stride=(0, 1))
    got = est(aten.mul.Tensor, T(6, 10), expanded, out=T(6, 10))
    assert got.bytes_read == 240 + 40


def test_strided_view_operand_read_at_numel():
    transposed = T(10, 6, stride=(1, 10))  # a permuted view: every element distinct
    got = est(aten.exp.default, transposed, out=T(10, 6))
    assert (got.flops, got.bytes_read) == (60, 240)


# Reductions of a (6, 10) tensor over its last dim: N = 60 inputs, m = 6 outputs of n = 10.
# Each value from the algorithm, by hand (not from op_costs.reduction's table).
EXPECTED_REDUCTIONS = {
    **dict.fromkeys("sum prod amax amin max min argmax argmin any all nansum".split(),
                    6 * (10 - 1)),     # n - 1 combines per output
    "aminmax": 2 * 6 * 9,              # both extremes
    "count_nonzero": 60 + 6 * 9,       # a compare per element, then the adds
    "mean": 6 * (9 + 1),               # n - 1 adds and a divide per output
    "var": 6 * (10 + 10 + 10 + 9 + 1),  # mean, sub, square, sum, divide
    "var_mean": 6 * 40,
    "std": 6 * (40 + 1),               # var and a square root
    "std_mean": 6 * 41,
    "linalg_vector_norm": 6 * (10 + 9 + 1),  # square, sum, root
    "norm": 6 * 20,
    "logsumexp": 6 * (9 + 10 + 10 + 9 + 1 + 1),  # max, sub, exp, sum, log, add max back
    "dist": 6 * (10 + 10 + 9 + 1),     # sub, square, sum, root
    "hash_tensor": 60,                 # one combine per input element
}


@pytest.mark.parametrize("name", sorted(EXPECTED_REDUCTIONS))
def test_reduction_closed_form(name):
    packet = getattr(aten, name)
    op = getattr(packet, packet.overloads()[0])
    got = op_costs.estimate(op, (T(6, 10), [1]), {}, T(6))
    assert got.flops == EXPECTED_REDUCTIONS[name]


def test_every_reduction_is_in_the_hand_table():
    registered = {r.name[len("reduction["):-1] for r in op_costs.RULES.values()
                  if r.name.startswith("reduction[") and r.name != "reduction[tagged]"}
    assert registered == set(EXPECTED_REDUCTIONS)


def test_unknown_op_gets_bytes_only_default():
    # bincount's output size depends on the data: no rule, so the default, never zero bytes
    got = est(aten.bincount.default, T(50, dtype=torch.int64), out=T(9, dtype=torch.int64))
    assert got.rule == op_costs.DEFAULT_RULE
    assert got.flops == 0
    assert got.bytes_read == 50 * 8 and got.bytes_written == 9 * 8


FOREACH = sorted(r.name[len("foreach["):-1] for r in op_costs.RULES.values()
                 if r.name.startswith("foreach["))


@pytest.mark.parametrize("name", FOREACH)
def test_foreach_weight_times_the_lists_elements(name):
    """A foreach op is its pointwise op over every tensor of its lists: the hand table's
    weight times all elements; in place it writes its first list (it returns nothing)."""
    packet = getattr(aten, f"_foreach_{name}_")
    op = getattr(packet, "List" if "List" in packet.overloads() else packet.overloads()[0])
    lists = (PL,) * len([a for a in op._schema.arguments if str(a.type) == "List[Tensor]"])
    got = op_costs.estimate(op, lists, {}, None)
    assert got.flops == EXPECTED_POINTWISE[name] * PE
    assert got.bytes_written == PLB and got.bytes_read == len(lists) * PLB
    assert got.rule == f"foreach[{name}]"
