"""Costs of whole forward+backward graphs of small modules against closed forms.

Independent check for convolutions: with all-ones input and weight (and no padding), every
output element of a convolution equals the number of multiply-adds that produced it, so the
sum of the real output is the true MAC count of the op -- computed by PyTorch's own kernel,
not by any formula of ours.
"""
import pytest
import torch
from torch import nn
import torch.nn.functional as F

import fxroof


def by_target(g, target, phase=None):
    return [r for r in g.records(phase) if r["target"] == target]


def one(g, target, phase=None):
    rows = by_target(g, target, phase)
    assert len(rows) == 1, [r["name"] for r in rows]
    return rows[0]


def ones_macs(conv: nn.Module, x_shape) -> int:
    conv = conv.to(torch.float64)
    with torch.no_grad():
        for p in conv.parameters():
            p.fill_(1.0)
        if conv.bias is not None:
            conv.bias.zero_()
        return int(conv(torch.ones(x_shape, dtype=torch.float64)).sum().item())


CONVS = [
    ("conv2d stride dilation", lambda: nn.Conv2d(4, 6, 3, stride=2, dilation=2), (2, 4, 13, 13)),
    ("grouped", lambda: nn.Conv2d(8, 12, 3, groups=4), (2, 8, 9, 9)),
    ("depthwise", lambda: nn.Conv2d(8, 8, 5, groups=8, stride=2), (2, 8, 15, 15)),
    ("conv1d", lambda: nn.Conv1d(3, 5, 4, stride=3), (2, 3, 20)),
    ("conv3d", lambda: nn.Conv3d(2, 3, (2, 3, 3)), (1, 2, 5, 6, 6)),
    ("transposed", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2), (2, 4, 5, 5)),
    ("transposed grouped", lambda: nn.ConvTranspose2d(6, 4, 3, stride=2, groups=2), (1, 6, 4, 4)),
]


@pytest.mark.parametrize("make,x_shape", [c[1:] for c in CONVS], ids=[c[0] for c in CONVS])
def test_conv_forward_and_backward_macs_match_ones_convolution(make, x_shape):
    conv = make()
    macs = ones_macs(make(), x_shape)
    # a second conv in front, so the conv under test also computes grad_input
    front = nn.Conv1d(x_shape[1], x_shape[1], 1) if len(x_shape) == 3 else (
        nn.Conv2d(x_shape[1], x_shape[1], 1) if len(x_shape) == 4 else
        nn.Conv3d(x_shape[1], x_shape[1], 1))
    model = nn.Sequential(front, conv)
    g = fxroof.analyze(model, torch.randn(x_shape), backward=True)
    fwd = [r for r in g.records("forward") if r["module"] == "1"
           and r["op"] == "convolution"][0]
    out_elements = 1
    for d in fwd["shape"]:
        out_elements *= d
    assert fwd["macs"] == macs
    assert fwd["flops"] == 2 * macs + out_elements  # + bias
    bwd = [r for r in g.records("backward") if r["forward_node"] == fwd["name"]]
    assert [r["op"] for r in bwd] == ["convolution_backward"]
    # grad_input + grad_weight: 2x the forward MACs; grad_bias: one add per output element
    assert bwd[0]["macs"] == 2 * macs
    assert bwd[0]["flops"] == 4 * macs + out_elements
    # the first conv sees no grad_input request: only grad_weight + grad_bias
    first_bwd = [r for r in g.records("backward") if r["module"] == "0"][0]
    first_fwd = [r for r in g.records("forward") if r["module"] == "0"][0]
    assert first_bwd["macs"] == first_fwd["macs"]


def test_depthwise_is_not_overcounted_by_the_channel_count():
    c, k, hw = 32, 3, 16
    g = fxroof.analyze(nn.Conv2d(c, c, k, groups=c, padding=1, bias=False),
                       torch.randn(1, c, hw, hw), backward=True)
    # each output element: k*k MACs over one input channel
    assert one(g, "aten.convolution.default")["macs"] == c * hw * hw * k * k
    assert one(g, "aten.convolution_backward.default")["macs"] == c * hw * hw * k * k


def test_linear_forward_backward():
    b, i, o = 8, 32, 16
    g = fxroof.analyze(nn.Sequential(nn.Linear(i, i), nn.Linear(i, o)), torch.randn(b, i),
                       backward=True)
    fwd_macs = sum(r["macs"] for r in g.records("forward"))
    assert fwd_macs == b * i * i + b * i * o
    bwd = [r for r in g.records("backward") if r["module"] == "1"]
    # grad_input (b x o @ o x i) and grad_weight (o x b @ b x i) as two mms, grad_bias a sum
    assert sum(r["macs"] for r in bwd) == 2 * b * i * o
    # the bias gradient sums b rows into o outputs: (b - 1) adds each
    assert sum(r["flops"] for r in bwd if r["op"] == "sum") == (b - 1) * o
    first = [r for r in g.records("backward") if r["module"] == "0"]
    assert sum(r["macs"] for r in first) == b * i * i  # grad_weight only: input needs no grad


class Attention(nn.Module):
    def __init__(self, b, h, l, s, e, causal):
        super().__init__()
        self.q = nn.Parameter(torch.randn(b, h, l, e))
        self.k = nn.Parameter(torch.randn(b, h, s, e))
        self.v = nn.Parameter(torch.randn(b, h, s, e))
        self.causal = causal

    def forward(self, x):
        return F.scaled_dot_product_attention(self.q * x, self.k, self.v, is_causal=self.causal)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_forward_backward(causal):
    b, h, l, s, e = 2, 3, 16, 16, 8
    g = fxroof.analyze(Attention(b, h, l, s, e, causal), torch.randn(1), backward=True)
    fwd = [r for r in g.records("forward") if "attention" in r["op"]][0]
    bwd = [r for r in g.records("backward") if "attention" in r["op"]][0]
    pairs = b * h * (l * (l + 1) // 2 if causal else l * s)
    assert fwd["macs"] == pairs * 2 * e
    assert fwd["flops"] == pairs * (4 * e + 6)
    assert bwd["macs"] == pairs * 5 * e
    assert bwd["flops"] == pairs * (10 * e + 6) + b * h * l * 2 * e
    assert bwd["forward_node"] == fwd["name"]


def test_batchnorm_train_and_eval():
    x = torch.randn(4, 8, 5, 5)
    n = x.numel()
    g = fxroof.analyze(nn.Sequential(nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8)), x, backward=True)
    assert one(g, "aten.native_batch_norm.default")["flops"] == 8 * n
    assert one(g, "aten.native_batch_norm_backward.default")["flops"] == (10 + 2 + 1) * n
    g = fxroof.analyze(nn.BatchNorm2d(8), x)
    bn = [r for r in g.records() if "batch_norm" in r["op"]][0]
    assert bn["flops"] == 4 * n


def test_layer_norm_and_gelu_mlp_backward():
    x = torch.randn(4, 10, 16)
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU())
    g = fxroof.analyze(model, x, backward=True)
    n = x.numel()
    assert one(g, "aten.native_layer_norm_backward.default")["flops"] == 13 * n
    assert one(g, "aten.gelu.default")["flops"] == 5 * n
    assert one(g, "aten.gelu_backward.default")["flops"] == 11 * n


def test_pooling_forward_backward():
    x = torch.randn(2, 3, 16, 16)
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.MaxPool2d(2), nn.AvgPool2d(2),
                          nn.AdaptiveAvgPool2d(3))
    g = fxroof.analyze(model, x, backward=True)
    nc = 2 * 3
    assert one(g, "aten.max_pool2d_with_indices.default")["flops"] == nc * 8 * 8 * 4
    assert one(g, "aten.max_pool2d_with_indices_backward.default")["flops"] == nc * 8 * 8
    assert one(g, "aten.avg_pool2d.default")["flops"] == nc * 4 * 4 * 4
    assert one(g, "aten.avg_pool2d_backward.default")["flops"] == nc * 4 * 4 * 4
    # adaptive 4 -> 3: windows [0,2) [1,3) [2,4), 6 elements per dim
    assert one(g, "aten._adaptive_avg_pool2d.default")["flops"] == nc * 6 * 6
    assert one(g, "aten._adaptive_avg_pool2d_backward.default")["flops"] == nc * 6 * 6


def test_embedding_forward_backward():
    model = nn.Sequential(nn.Embedding(1000, 16), nn.Linear(16, 4))
    g = fxroof.analyze(model, torch.randint(0, 1000, (2, 5)), backward=True)
    emb = one(g, "aten.embedding.default")
    assert emb["bytes_read"] == 10 * 8 + 10 * 16 * 4  # indices + gathered rows, not the table
    back = one(g, "aten.embedding_dense_backward.default")
    assert back["flops"] == 10 * 16 and back["bytes_written"] == 1000 * 16 * 4


def test_inplace_relu_costs_like_relu():
    x = torch.randn(2, 3, 8, 8)
    inplace = fxroof.analyze(nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU(inplace=True)), x)
    functional = fxroof.analyze(nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU()), x)
    a = one(inplace, "aten.relu_.default")
    b = one(functional, "aten.relu.default")
    assert (a["flops"], a["bytes"]) == (b["flops"], b["bytes"]) == (x.numel(), 2 * 4 * x.numel())


class Broadcast(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(16))

    def forward(self, x):
        return x.transpose(0, 1) * self.scale  # a strided view times a broadcast vector


def test_broadcast_and_strided_view_in_a_graph():
    g = fxroof.analyze(Broadcast(), torch.randn(16, 8), backward=True)
    mul = one(g, "aten.mul.Tensor", "forward")
    assert mul["flops"] == 128
    assert mul["bytes_read"] == (128 + 16) * 4 and mul["bytes_written"] == 128 * 4
    assert one(g, "aten.transpose.int", "forward")["bytes"] == 0


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_fast_path_does_not_change_flops(activation):
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0,
                                       activation=activation)
    x = torch.randn(2, 6, 32)
    fast = fxroof.analyze(layer, x)  # no_grad eval: one fused _transformer_encoder_layer_fwd
    assert {r["op"] for r in fast.records()} == {"_transformer_encoder_layer_fwd"}
    slow = fxroof.analyze(layer, x, backward=True, mode="eval")  # grad on: the op-by-op path
    assert fast.totals()["forward"]["flops"] == slow.totals()["forward"]["flops"]
    assert fast.totals()["forward"]["macs"] == slow.totals()["forward"]["macs"]


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "vit_b_32"])
def test_macs_reproduce_torchvision_ops_metadata(name):
    import torchvision

    g = fxroof.analyze(name)
    expected = torchvision.models.get_model_weights(name).DEFAULT.meta["_ops"]  # GMACs
    assert round(g.totals()["forward"]["macs"] / 1e9, 3) == expected


def test_backward_about_twice_forward_for_a_convnet():
    g = fxroof.analyze("resnet18", batch=2, backward=True)
    t = g.totals()
    ratio = t["backward"]["flops"] / t["forward"]["flops"]
    # grad_input and grad_weight each cost a forward conv; the first conv has no grad_input
    assert 1.8 < ratio < 2.0
