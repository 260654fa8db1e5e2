"""Property-based checks over random layer configurations (hypothesis).

For convolutions the reference is independent of our formula: with all-ones input and weight
and no padding, the sum of PyTorch's own output is the number of multiply-adds performed.
"""
import json

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
import torch.nn.functional as F

import fxroof

FAST = settings(max_examples=12, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def ones_macs(conv, x_shape):
    conv = conv.double()
    with torch.no_grad():
        for p in conv.parameters():
            p.fill_(1.0)
        return int(conv(torch.ones(x_shape, dtype=torch.float64)).sum().item())


@st.composite
def conv_configs(draw):
    groups = draw(st.sampled_from([1, 2, 4]))
    cin = groups * draw(st.integers(1, 3))
    cout = groups * draw(st.integers(1, 3))
    k = draw(st.integers(1, 4))
    stride = draw(st.integers(1, 3))
    dilation = draw(st.integers(1, 2))
    transposed = draw(st.booleans())
    size = draw(st.integers(dilation * (k - 1) + 1, 12))
    batch = draw(st.integers(1, 3))
    return groups, cin, cout, k, stride, dilation, transposed, size, batch


def build_conv(groups, cin, cout, k, stride, dilation, transposed):
    cls = nn.ConvTranspose2d if transposed else nn.Conv2d
    return cls(cin, cout, k, stride=stride, dilation=dilation, groups=groups, bias=False)


@FAST
@given(conv_configs())
def test_conv_macs_match_the_ones_convolution_and_scale_with_batch(cfg):
    groups, cin, cout, k, stride, dilation, transposed, size, batch = cfg
    conv = build_conv(groups, cin, cout, k, stride, dilation, transposed)
    shape = (batch, cin, size, size)
    macs = ones_macs(build_conv(groups, cin, cout, k, stride, dilation, transposed), shape)
    model = nn.Sequential(nn.Conv2d(cin, cin, 1), conv)  # so the conv also needs grad_input
    g = fxroof.analyze(model, torch.randn(shape), backward=True)
    fwd = [r for r in g.records("forward") if r["module"] == "1" and r["op"] == "convolution"]
    bwd = [r for r in g.records("backward") if r["forward_node"] == fwd[0]["name"]]
    assert fwd[0]["macs"] == macs and fwd[0]["flops"] == 2 * macs
    assert bwd[0]["macs"] == 2 * macs
    assert all(r["flops"] >= 0 and r["bytes_read"] >= 0 and r["bytes_written"] >= 0
               for r in g.records())
    doubled = fxroof.analyze(model, torch.randn((2 * batch,) + shape[1:]), backward=True)
    for phase in ("forward", "backward"):
        # every op here is per-sample except weight-sized terms, which the MACs exclude
        assert doubled.totals()[phase]["macs"] == 2 * g.totals()[phase]["macs"]


@FAST
@given(st.integers(1, 16), st.integers(1, 16), st.integers(1, 16), st.booleans())
def test_linear_forward_backward(batch, fan_in, fan_out, bias):
    model = nn.Sequential(nn.Linear(fan_in, fan_in), nn.Linear(fan_in, fan_out, bias=bias))
    g = fxroof.analyze(model, torch.randn(batch, fan_in), backward=True)
    layer = [r for r in g.records() if r["module"] == "1"]
    fwd = sum(r["macs"] for r in layer if r["phase"] == "forward")
    bwd = sum(r["macs"] for r in layer if r["phase"] == "backward")
    assert fwd == batch * fan_in * fan_out
    assert bwd == 2 * batch * fan_in * fan_out


@FAST
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 12), st.integers(1, 12),
       st.integers(1, 8), st.booleans())
def test_attention_pairs_closed_form(batch, heads, length, source, dim, causal):
    q = torch.randn(batch, heads, length, dim)
    k = torch.randn(batch, heads, source, dim)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.k = nn.Parameter(k)

        def forward(self, q):
            return F.scaled_dot_product_attention(q, self.k, self.k, is_causal=causal)

    g = fxroof.analyze(Attention(), q, backward=True)
    fwd = [r for r in g.records("forward") if "attention" in r["op"]][0]
    # brute force: the number of (i, j) pairs with j <= i (top-left causal) or all pairs
    pairs = sum(1 for i in range(length) for j in range(source) if not causal or j <= i)
    assert fwd["macs"] == batch * heads * pairs * 2 * dim


@FAST
@given(st.integers(1, 3), st.integers(1, 4), st.integers(2, 12), st.integers(1, 6))
def test_adaptive_pool_windows_sum_brute_force(batch, channels, size, out):
    from op_costs.pooling import adaptive_window_sum

    # brute force: each output i averages inputs floor(i*n/m) .. ceil((i+1)*n/m) - 1
    import math

    brute = sum(math.ceil((i + 1) * size / out) - math.floor(i * size / out) for i in range(out))
    assert adaptive_window_sum(size, out) == brute
    g = fxroof.analyze(nn.AdaptiveAvgPool2d(out), torch.randn(batch, channels, size, size))
    pool = [r for r in g.records() if r["layer_type"] == "AdaptiveAvgPool2d"]
    assert sum(r["flops"] for r in pool) >= batch * channels * out * out  # at least one per output


def test_analysis_is_deterministic(tmp_path):
    a, b = (fxroof.analyze("mobilenet_v3_small", batch=2, backward=True) for _ in range(2))
    a.to_json(str(tmp_path / "a.json"))
    b.to_json(str(tmp_path / "b.json"))
    assert json.loads((tmp_path / "a.json").read_text()) == json.loads(
        (tmp_path / "b.json").read_text())
