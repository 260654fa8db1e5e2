"""Every cost rule against its closed form, called directly on tensor metadata.

Each case gives the op, its arguments (tensors as metadata) and the FLOPs / MACs / bytes that
the formula in the rule's module docstring yields, computed here from first principles.
A final test checks that every rule registered has at least one case here.
"""

import pytest
import torch

import op_costs
from op_costs import pointwise, reduction
from tests.conftest import T

aten = torch.ops.aten
F4 = 4  # bytes per float32


def est(op, *args, out, **kwargs):
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
    ("matmul", aten.matmul.default, (T(B, M, K), T(K, N)), {}, T(B, M, N),
     dict(macs=B * M * K * N, flops=2 * B * M * K * N)),
    ("linear", aten.linear.default, (T(B, K), T(N, K), T(N)), {}, T(B, N),
     dict(macs=B * K * N, flops=2 * B * K * N + B * N)),
    ("mv", aten.mv.default, (T(M, K), T(K)), {}, T(M), dict(macs=M * K, flops=2 * M * K)),
    ("addmv", aten.addmv.default, (T(M), T(M, K), T(K)), {}, T(M),
     dict(macs=M * K, flops=2 * M * K + M)),
    ("outer", aten.outer.default, (T(M), T(N)), {}, T(M, N), dict(flops=M * N, macs=0)),
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
    ("conv2d", aten.conv2d.default, (T(1, 3, 8, 8), T(5, 3, 3, 3)), {}, T(1, 5, 6, 6),
     dict(macs=5 * 36 * 27, flops=2 * 5 * 36 * 27)),
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
    ("sdpa flash (cuda)", aten._scaled_dot_product_flash_attention.default,
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
    ("sdpa cudnn backward", aten._scaled_dot_product_cudnn_attention_backward.default,
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
    # pooling: (2, 3, 8, 8), 3x3 window, stride 2 -> 3x3 outputs... out given explicitly
    ("max_pool2d", aten.max_pool2d_with_indices.default, (T(2, 3, 8, 8), [3, 3], [2, 2]), {},
     (T(2, 3, 3, 3), T(2, 3, 3, 3, dtype=torch.int64)), dict(flops=54 * 9)),
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
    ("clone of a transposed view", aten.clone.default, (T(10, 6, stride=(1, 10)),), {},
     T(10, 6), dict(flops=0, bytes_read=240, bytes_written=240)),
    ("to bf16", aten._to_copy.default, (T(6, 10),), {"dtype": torch.bfloat16},
     T(6, 10, dtype=torch.bfloat16), dict(flops=0, bytes_read=240, bytes_written=120)),
    ("cat", aten.cat.default, ([T(6, 10), T(4, 10)],), {}, T(10, 10),
     dict(bytes_read=400, bytes_written=400)),
    ("copy_", aten.copy_.default, (T(6, 10), T(6, 10, dtype=torch.float16)), {}, T(6, 10),
     dict(bytes_read=120, bytes_written=240)),
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


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_closed_form(case):
    _, op, args, kwargs, out, expected = case
    got = est(op, *args, out=out, **kwargs)
    for field, value in expected.items():
        assert getattr(got, field) == value, f"{field}: {getattr(got, field)} != {value}"
    assert got.rule != op_costs.DEFAULT_RULE


def test_every_rule_has_a_closed_form_case():
    """A rule without a case here is a rule nobody checked."""
    covered = {op_costs.rule_for(case[1]).name for case in CASES}
    covered |= {r.name for r in op_costs.RULES.values()
                if r.name.startswith(("pointwise[", "reduction["))}  # parametrized below
    unchecked = {r.name for r in op_costs.RULES.values()} - covered
    assert not unchecked, f"rules with no closed-form case: {sorted(unchecked)}"


POINTWISE = sorted(pointwise.WEIGHTS.items())


@pytest.mark.parametrize("name,weight", POINTWISE, ids=[n for n, _ in POINTWISE])
def test_pointwise_weight_times_output_elements(name, weight):
    packet = getattr(aten, name, None)
    if packet is None:
        pytest.skip(f"aten.{name} does not exist in this torch build")
    op = packet.overloads()[0]
    x = T(6, 10)
    got = op_costs.estimate(getattr(packet, op), (x, x), {}, x)
    assert got.flops == weight * 60
    assert got.rule == f"pointwise[{name}]"


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


REDUCTIONS = [(p_in, p_out, name) for p_in, p_out, names in reduction._REDUCTIONS
              for name in names.split()]


@pytest.mark.parametrize("per_input,per_output,name", REDUCTIONS,
                         ids=[r[2] for r in REDUCTIONS])
def test_reduction_closed_form(per_input, per_output, name):
    packet = getattr(aten, name)
    op = getattr(packet, packet.overloads()[0])
    got = op_costs.estimate(op, (T(6, 10), [1]), {}, T(6))
    assert got.flops == per_input * 60 + per_output * 6


def test_unknown_op_gets_bytes_only_default():
    got = est(aten._fft_r2c.default, T(8, 16), [1], 0, True, out=T(8, 9, dtype=torch.complex64))
    assert got.rule == op_costs.DEFAULT_RULE
    assert got.flops == 0
    assert got.bytes_read == 8 * 16 * 4 and got.bytes_written == 8 * 9 * 8
