"""Calibrating the time model on the local device: time one small module per probe, cost it
with fxroof's own rules, and fit fxroof.calibration's parameters per op class.

The probes cover each class the model distinguishes -- GEMMs (square, skinny, batched),
convolutions (dense 3x3, 1x1, depthwise, strided; NCHW and channels-last; and those of one
small image, which a CPU runs with ATen's kernels rather than oneDNN's), depthwise
convolution backward passes (3x3, and wider kernels in both layouts), elementwise ops (new
outputs and in place), transcendental activations (GELU, SiLU, sigmoid), pooling (and, on a
CPU, its backward), copies (concatenation, channel shuffle), norms (batch and layer norm)
and softmax -- over sizes from a few microseconds to tens of milliseconds, so both the fixed
cost per op and the sustained rates are seen. One more probe measures the rate at which a
CPU first touches a freshly mapped output (hidden_bytes.fresh_bytes). Each forward probe
runs eagerly under no_grad, as a model's layers do (a backward probe calls its ATen backward
-- convolution_backward, a pooling's -- as autograd does), and its time is the fastest of
its repeats (a sustained rate, not a busy machine's median). FLOPs and bytes come from
``fxroof.analyze`` of the same module, so the fitted fractions are fractions of exactly what
fxroof predicts with. A convolution's layout reorders (an NCHW one's operands, a
channels-last one's weights) are priced at the device's copy bandwidth (layout_rate) and
held, not fitted. A GPU is fitted as NeuSight's kernel sweeps are
(benchmarks/calibrate_gpu_kernels.py): its GEMMs and convolutions over its tiles and
multiprocessors, its memory-bound classes with a fixed cost that overlaps the kernel and a
memory rate held at that of probes moving many times its L2 (streaming_probes).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple, Optional

import numpy as np
import torch
from torch import nn

from fxroof import calibration as cal, hidden_bytes, op_classes
from fxroof.analysis import analyze
from fxroof.chips import Chip, parse_chip
from fxroof.device import (GpuShape, Stopwatch, check_device, gpu_shape, host_allocator,
                           layout_block, repeat)
from fxroof.errors import FxroofError
from fxroof.latency import child_main, error_record, in_fresh_process
from fxroof.measure import measure
from fxroof.model_probes import model_rows
from fxroof.roofline import peak_for


class _Cat(nn.Module):
    def forward(self, x):
        return torch.cat([x, x], 1)


class _ChannelShuffle(nn.Module):
    """ShuffleNet's channel shuffle: a transpose made contiguous (one strided copy)."""

    def forward(self, x):
        b, c, h, w = x.shape
        return x.view(b, 2, c // 2, h, w).transpose(1, 2).contiguous()


def _linear(k: int, n: int) -> nn.Linear:
    """nn.Linear(k, n) without bias, its weights uniform in +-1 / sqrt(k) as nn.Linear draws
    them, but drawn for a block of rows and repeated: drawing the probes' 321 M weights one
    by one took 3 s of a quick calibration (nn.init's uniform_, about 0.1 G values/s on this
    machine's CPU). A kernel's time does not depend on its values on a CPU; a GPU's power
    draw does, on how many bits toggle, which a random block repeated still makes them do."""
    layer = nn.utils.skip_init(nn.Linear, k, n, bias=False)
    rows = math.gcd(n, 64)
    block = torch.empty(rows, k).uniform_(-k ** -0.5, k ** -0.5)
    with torch.no_grad():
        layer.weight.view(n // rows, rows, k).copy_(block.expand(n // rows, rows, k))
    return layer


class _Outer(nn.Module):
    """A Linear layer's weight gradient at batch 1: the output gradient (m x 1) times the
    input (1 x n), an outer product (k = 1) that writes m x n and reads almost nothing."""

    def __init__(self, m: int):
        super().__init__()
        self.register_buffer("grad", torch.randn(m, 1))

    def forward(self, x):
        return torch.mm(self.grad, x)


class _Dropout(nn.Module):
    """Dropout's mask as eager PyTorch draws it in training: a new tensor filled by
    bernoulli_ (the scaling and the multiply after it are elementwise ops)."""

    def forward(self, x):
        return torch.empty_like(x).bernoulli_(0.5)


# Classes probed on a CPU only: a GPU's draws run as elementwise ops do (op_classes)
CPU_ONLY_CLASSES = ("random",)
# (op class, label, module factory, input shape)
PROBES = [
    *[("gemm", f"linear {n}x{n}x{n}", lambda n=n: _linear(n, n), (n, n))
      for n in (32, 64, 128, 256, 512, 1024, 2048)],
    *[("gemm", f"linear {m}x{k}x{n}", lambda k=k, n=n: _linear(k, n), (m, k))
      for m, k, n in ((8, 4096, 1024), (1024, 64, 1024), (256, 256, 2048))],
    # products of few rows and cache-resident weights (ConvNeXt's and Swin's last stage at
    # batch 1: 49 tokens), where packing the weights on each call costs as much as the
    # multiply-adds (calibration.utilization's pack_half)
    *[("gemm", f"linear {m}x{k}x{n}", lambda k=k, n=n: _linear(k, n), (m, k))
      for m, k, n in ((49, 768, 3072), (49, 3072, 768), (32, 1024, 1024))],
    # GEMMs that stream their weights from memory (67-151 MB), as a classifier at a small
    # batch does: the only rows that fit the class's memory rate. With two of them, the
    # robust fit could treat both as outliers, and four measurements of one machine gave
    # memory fractions of 0.10-1.0 (the 0.10 one priced alexnet's inference at 2.0x)
    *[("gemm", f"linear {m}x{k}x{n}", lambda k=k, n=n: _linear(k, n), (m, k))
      for m, k, n in ((8, 4096, 4096), (4, 4096, 8192), (16, 9216, 4096), (2, 9216, 4096))],
    # Matrix-vector products (op_classes.matrix_vector), a classifier's at batch 1: from
    # cache-resident (4-16 MB) to streaming weights (67-411 MB: alexnet's and vgg16's first
    # classifier layers)
    *[("gemv", f"linear {m}x{k}x{n}", lambda k=k, n=n: _linear(k, n), (m, k))
      for m, k, n in ((1, 1024, 1024), (1, 4096, 1000), (1, 9216, 4096), (1, 4096, 4096),
                      (1, 2048, 8192), (1, 25088, 4096))],
    # Outer products, a classifier's weight gradients at batch 1 (5-151 MB written): the
    # only GEMMs bound by writing their output. Without them the class's memory rate was
    # fitted on the few-row products above, which its packing term explains as well: one
    # measurement of a 2-core EPYC fitted it at 2.3 GB/s and priced alexnet's training step
    # at 1.7x, its 4096 x 9216 weight gradient (17 ms) at 64 ms
    *[("gemm", f"outer {m}x1x{n}", lambda m=m: _Outer(m), (1, n))
      for m, n in ((1000, 1280), (4096, 4096), (4096, 9216))],
    *[("conv", f"conv3x3 c{c} {s}px", lambda c=c: nn.Conv2d(c, c, 3, padding=1, bias=False),
       (1, c, s, s)) for c, s in ((16, 16), (32, 32), (64, 28), (64, 56), (128, 28), (256, 14))],
    *[("conv", f"conv1x1 c{c} {s}px", lambda c=c: nn.Conv2d(c, 2 * c, 1, bias=False),
       (1, c, s, s)) for c, s in ((32, 56), (128, 28), (256, 14))],
    *[("conv", f"depthwise c{c} {s}px",
       lambda c=c: nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), (1, c, s, s))
      for c, s in ((32, 56), (96, 28), (192, 14), (384, 7))],
    ("conv", "conv7x7/2 c3 224px", lambda: nn.Conv2d(3, 64, 7, 2, 3, bias=False),
     (1, 3, 224, 224)),
    # convolutions of one small image, which a CPU runs with ATen's im2col + GEMM kernels,
    # not oneDNN's (op_costs.conv.CPU_NATIVE; the conv_native class there, conv on a GPU):
    # 1x1 ones of a 14 x 14 map and of a squeeze-and-excitation block's pooled one, and a
    # 3x3 one of a late stage's 7 x 7 map
    *[("conv", f"conv{k}x{k} c{c}->{o} {s}px",
       lambda c=c, o=o, k=k: nn.Conv2d(c, o, k, padding=k // 2, bias=False), (1, c, s, s))
      for c, o, k, s in ((80, 184, 1, 14), (960, 240, 1, 1), (72, 24, 1, 1), (128, 32, 3, 7))],
    *[("elementwise", f"relu {n}", lambda: nn.ReLU(), (n,))
      for n in (256, 4096, 65536, 2 ** 20, 2 ** 23)],
    # activations that evaluate a transcendental per element (op_classes.MATH_OPS), the
    # ones models run: GELU (erf), SiLU and sigmoid, from cache-resident to streaming
    *[("math", f"gelu {n}", lambda: nn.GELU(), (n,)) for n in (4096, 65536, 2 ** 20, 2 ** 22)],
    *[("math", f"silu {n}", lambda: nn.SiLU(), (n,)) for n in (65536, 2 ** 20)],
    *[("math", f"sigmoid {n}", lambda: nn.Sigmoid(), (n,)) for n in (4096, 2 ** 20)],
    *[("elementwise", f"relu_ {n}", lambda: nn.ReLU(inplace=True), (n,))  # models' ReLU
      for n in (65536, 2 ** 20, 2 ** 23)],
    # dropout's Bernoulli draws (op_classes.RANDOM_OPS): a classifier's 1,280-9,216 at batch
    # 1 to SqueezeNet's 0.7 M at batch 8
    *[("random", f"bernoulli {n}", lambda: _Dropout(), (n,)) for n in (4096, 65536, 2 ** 20)],
    *[("pool", f"maxpool 3x3/2 {b}x{c}x{s}px", lambda: nn.MaxPool2d(3, 2, 1), (b, c, s, s))
      for b, c, s in ((1, 64, 112), (8, 64, 112), (1, 192, 28))],
    *[("pool", f"avgpool 2x2/2 c{c} {s}px", lambda: nn.AvgPool2d(2, 2), (1, c, s, s))
      for c, s in ((256, 56), (128, 28))],
    *[("pool", f"avgpool 3x3/1 c{c} {s}px", lambda: nn.AvgPool2d(3, 1, 1), (b, c, s, s))
      for b, c, s in ((1, 192, 35), (8, 256, 17))],  # Inception's pooling branches
    *[("copy", f"cat {b}x{c}x{s}px", lambda: _Cat(), (b, c, s, s))
      for b, c, s in ((1, 32, 28), (1, 128, 56), (8, 256, 56))],  # the last is freshly mapped
    *[("copy", f"channel shuffle {b}x{c}x{s}px", lambda: _ChannelShuffle(), (b, c, s, s))
      for b, c, s in ((1, 58, 28), (1, 116, 56), (8, 232, 28))],
    *[("norm", f"batchnorm c{c} {s}px", lambda c=c: nn.BatchNorm2d(c).eval(), (1, c, s, s))
      for c, s in ((16, 16), (64, 56), (256, 14), (128, 56))],
    *[("norm", f"layernorm {r}x{c}", lambda c=c: nn.LayerNorm(c), (r, c))
      for r, c in ((8, 64), (128, 768), (1024, 1024))],
    *[("softmax", f"softmax {r}x{c}", lambda: nn.Softmax(dim=-1), (r, c))
      for r, c in ((8, 64), (128, 512), (1024, 1024), (4096, 2048))],
]


def streaming_probes(l2_bytes: float) -> list:
    """A GPU's vector-class probes that stream from DRAM: each moves about 10 and 20 times
    the L2 (``l2_bytes``), past calibration.STREAMING_L2_MULTIPLE, so their rate is the
    memory's, not the cache's nor the fixed cost's (calibration.streaming_fraction). Sized
    from the device's L2 (40-50 MB on an A100 or H100: 0.4-1 GB a probe), since the fixed
    sizes of PROBES stay under it there."""
    probes = []
    for multiple in (10, 20):
        moved = multiple * l2_bytes
        relu = math.ceil(moved / 8)                      # 4 bytes read, 4 written
        rows = math.ceil(moved / (8 * 1024))             # (rows, 1024) fp32 in and out
        images = math.ceil(moved / (2 * 4 * 64 * 56 * 56))  # (b, 64, 56, 56) in and out
        # a 3x3/2 max pool reads its 112 x 112 input and writes a quarter of it; cat reads
        # its input twice and writes both copies
        pooled, joined = math.ceil(images / 2.5), math.ceil(images / 2)
        probes += [
            ("elementwise", f"relu {relu}", lambda: nn.ReLU(), (relu,)),
            ("elementwise", f"relu_ {relu}", lambda: nn.ReLU(inplace=True), (relu,)),
            ("norm", f"layernorm {rows}x1024", lambda: nn.LayerNorm(1024), (rows, 1024)),
            ("norm", f"batchnorm {images}x64x56px", lambda: nn.BatchNorm2d(64).eval(),
             (images, 64, 56, 56)),
            ("softmax", f"softmax {rows}x1024", lambda: nn.Softmax(dim=-1), (rows, 1024)),
            ("pool", f"maxpool 3x3/2 {pooled}x64x112px", lambda: nn.MaxPool2d(3, 2, 1),
             (pooled, 64, 112, 112)),
            ("copy", f"cat {joined}x64x56px", lambda: _Cat(), (joined, 64, 56, 56)),
        ]
    return probes


def _channels_last(probes: list) -> list:
    """The convolution probes again, channels-last (the layout Inductor gives a CPU
    convolution, and `--memory-format channels_last`'s): oneDNN runs these without the
    reorders an NCHW convolution pays on the way in and out (but for the weights'), and
    cuDNN's tensor cores without its transposes, so they have rates of their own. Not those
    of a 1 x 1 map, whose one layout is both (recorded as contiguous)."""
    return [("conv_cl", label + " channels-last", make, shape)
            for op_class, label, make, shape in probes
            if op_class == "conv" and math.prod(shape[2:]) > 1]


PROBES += _channels_last(PROBES)

# A GPU's convolution probes, at batches that fill it: PROBES' batch-1 ones are launch-bound
# there (20-40 us each on an H200), so they left the compute rate unknown, and a measured
# H200 priced resnet50 at b256 at 2.4x its time. ResNet's 3x3 and 1x1 layers, its stem and a
# MobileNet depthwise layer, 53-60 GFLOP each (over 100 us at an H100's TF32 peak) but the
# depthwise one, which streams 0.6 GB.
GPU_CONV_PROBES = [
    *[("conv", f"conv3x3 c{c} {b}x{s}px",
       lambda c=c: nn.Conv2d(c, c, 3, padding=1, bias=False), (b, c, s, s))
      for b, c, s in ((256, 64, 56), (256, 128, 28), (256, 256, 14), (256, 512, 7))],
    *[("conv", f"conv1x1 c{c} {b}x{s}px", lambda c=c: nn.Conv2d(c, 2 * c, 1, bias=False),
       (b, c, s, s)) for b, c, s in ((256, 128, 56), (256, 256, 28))],
    ("conv", "conv7x7/2 c3 256x224px", lambda: nn.Conv2d(3, 64, 7, 2, 3, bias=False),
     (256, 3, 224, 224)),
    ("conv", "depthwise c96 64x112px",
     lambda: nn.Conv2d(96, 96, 3, padding=1, groups=96, bias=False), (64, 96, 112, 112)),
]
GPU_CONV_PROBES += _channels_last(GPU_CONV_PROBES)


class _Scaled(nn.Module):
    """``layer`` of its input times a parameter: the input needs a gradient, so the backward
    graph holds the layer's own backward, as a model's does."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.layer = layer

    def forward(self, x):
        return self.layer(x * self.scale)


# Depthwise convolution backward passes, input and weight gradients (what a training step
# runs): 3x3 ones, stride 1 and 2, from maps that stay in the cache to 38 MB ones that
# stream (conv_bwd_dw), and 5x5 and 7x7 ones, whose weight gradient oneDNN computes by im2col
# and a GEMM per channel (conv_bwd_dw_wide; op_costs.conv.WIDE), in MnasNet's, EfficientNet's
# and ConvNeXt's shapes: that path's rate moved 1.3-9 GFLOP/s (of the node's work) with
# the shape on this project's CPU, with no form found, so the probes sample the shapes
# models have; and wide ones channels-last (conv_bwd_dw_wide_cl), as ConvNeXt's run.
# (batch, channels, size, kernel, stride).
BACKWARD_PROBES = [
    *[("conv_bwd_dw", (b, c, s, 3, stride))
      for b, c, s, stride in ((1, 32, 56, 1), (1, 96, 28, 2), (1, 240, 14, 1), (8, 96, 28, 1),
                              (8, 144, 56, 2), (8, 240, 28, 1), (8, 32, 112, 1),
                              (8, 96, 112, 2))],
    *[("conv_bwd_dw_wide", (b, c, s, k, stride))
      for b, c, s, k, stride in ((1, 120, 28, 5, 1), (1, 480, 14, 5, 1), (1, 384, 14, 7, 1),
                                 (8, 72, 28, 5, 1), (8, 48, 56, 5, 2), (8, 240, 14, 5, 1),
                                 (8, 576, 7, 5, 1), (8, 96, 56, 7, 1))],
    *[("conv_bwd_dw_wide_cl", (b, c, s, k, 1))
      for b, c, s, k in ((1, 96, 56, 7), (1, 384, 14, 7), (8, 96, 56, 7), (8, 192, 28, 7),
                         (8, 768, 7, 7), (8, 72, 28, 5))],
]


# Pooling backward passes, CPU only: ResNet's and VGG's 3x3/2 max pool (pool_scatter), of
# maps in the cache and beyond it, and DenseNet's and Inception's average pools, whose
# backward scans its windows as the forward does (pool); a GPU's pooling kernels, forward and
# backward, are bounded by fxroof.launch_geometry instead.
# (module factory, input shape)
POOL_BACKWARD_PROBES = [
    *[(lambda: nn.MaxPool2d(3, 2, 1), (b, c, s, s))
      for b, c, s in ((1, 64, 112), (8, 64, 112), (1, 192, 28), (1, 64, 56))],
    (lambda: nn.AvgPool2d(2, 2), (1, 256, 56, 56)),
    (lambda: nn.AvgPool2d(3, 1, 1), (1, 192, 35, 35)),
]


def _pool_backward_call(pool: nn.Module, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """``pool``'s ATen backward of ``x`` (nn.MaxPool2d or nn.AvgPool2d), as a call with the
    arguments autograd passes it: a max pool's indices from its forward, and a random
    output gradient."""
    kernel, stride, padding = (list(nn.modules.utils._pair(v)) for v in (
        pool.kernel_size, pool.stride, pool.padding))
    if isinstance(pool, nn.MaxPool2d):
        out, indices = torch.ops.aten.max_pool2d_with_indices(x, kernel, stride, padding)
        grad = torch.randn_like(out)
        return lambda: torch.ops.aten.max_pool2d_with_indices_backward(
            grad, x, kernel, stride, padding, [1, 1], False, indices)
    grad = torch.randn_like(pool(x))
    return lambda: torch.ops.aten.avg_pool2d_backward(
        grad, x, kernel, stride, padding, pool.ceil_mode, pool.count_include_pad, None)


def _layout(op_class: str) -> torch.memory_format:
    """The layout a probe of ``op_class`` runs in: channels-last for the *_cl classes."""
    return torch.channels_last if op_class.endswith("_cl") else torch.contiguous_format


def _records(module: nn.Module, shape: tuple, memory_format: torch.memory_format) -> list:
    return analyze(module, torch.empty(shape, device="meta").to(
        memory_format=memory_format)).records()


def _cost(module: nn.Module, shape: tuple, op_class: str, seconds: float) -> cal.Row:
    """_priced_row's row, as a GPU files it (under the probe's own class)."""
    return _priced_row(module, shape, op_class, seconds, "gpu")[1]


def _priced_row(module: nn.Module, shape: tuple, op_class: str, seconds: float,
                device_class: str, block: int = 0) -> tuple[str, cal.Row]:
    """The probe's nodes of ``op_class`` as one row: their FLOPs, bytes, bytes written to
    fresh mappings and moved by layout reorders (of which results of uneven channels, on a
    device of ``block`` channels a block), by fxroof's own cost rules, and the reduction
    length k of the costliest, and whether it writes over its input (relu_: in_place); and
    the class that prices it on the device (on a CPU, conv_native for a convolution it
    runs with ATen's kernels: op_classes.op_class_on)."""
    nodes = [r for r in _records(module, shape, _layout(op_class))
             if op_classes.op_class_of(r) == op_class]
    layout = [hidden_bytes.layout_bytes(r) for r in nodes]
    costliest = max(nodes, key=lambda r: r["flops"])
    # by name: a field added to Row and left out here defaults to 0, silently (the relu_
    # probes' in_place did, once)
    return op_classes.op_class_on(costliest, device_class), cal.Row(
        flops=sum(r["flops"] for r in nodes), bytes=sum(r["bytes"] for r in nodes),
        fresh=sum(hidden_bytes.fresh_bytes(r) for r in nodes), seconds=seconds,
        k=op_classes.reduction_length(costliest),
        layout=sum(moved for moved, _ in layout),
        layout_fresh=sum(fresh for _, fresh in layout),
        pointwise=float(any(hidden_bytes.pointwise_weights(r) for r in nodes)),
        dims=cal.matrix_dims(costliest), saved=0.0,
        uneven=sum(hidden_bytes.unblocked_result_bytes(r, block) for r in nodes),
        in_place=float(all(op_classes.in_place(r) for r in nodes)))


# Runs per probe on a GPU, quick or not: each takes microseconds to a millisecond there, and
# the fastest of three left an H200's host jitter in the fit (two measurements minutes
# apart fitted the vector classes' serial fractions at 0.02-1.0 and 0.23-0.92)
GPU_REPEATS = 15


def sweep(device: torch.device, quick: bool = True,
          progress: Optional[Callable[[str], None]] = None) -> dict:
    """{op class: [calibration.Row, ...]} measured on ``device`` (on a GPU, with its
    streaming_probes and GPU_CONV_PROBES)."""
    say = progress or (lambda message: None)
    gpu = gpu_shape(device)
    repeats = GPU_REPEATS if gpu else 3 if quick else 15
    watch = Stopwatch(device)
    found: dict = {}
    extra = streaming_probes(gpu.l2_bytes) + GPU_CONV_PROBES if gpu else []
    for op_class, label, make, shape in PROBES + extra:
        if gpu and op_class in CPU_ONLY_CLASSES:
            continue
        say(f"probe {label}")
        module = make().to(device, memory_format=_layout(op_class))
        x = torch.randn(shape, device=device).to(memory_format=_layout(op_class))
        with torch.no_grad():
            seconds = min(repeat(lambda: watch.time(lambda: module(x)), 2, repeats))
        priced_as, row = _priced_row(module, shape, op_class, seconds,
                                     "gpu" if gpu else "cpu", layout_block(device))
        found.setdefault(priced_as, []).append(row)
    return found


def backward_sweep(device: torch.device, quick: bool = True,
                   progress: Optional[Callable[[str], None]] = None) -> dict:
    """{op class: [calibration.Row, ...]} of the depthwise backward probes on ``device``:
    the convolution_backward node of each, costed by fxroof's rules and timed alone with the
    arguments the step passes it."""
    say = progress or (lambda message: None)
    watch, found = Stopwatch(device), {}
    runs = GPU_REPEATS if gpu_shape(device) else 5 if quick else 10
    for op_class, (batch, channels, size, kernel, stride) in BACKWARD_PROBES:
        say(f"probe depthwise {kernel}x{kernel}/{stride} backward {batch}x{channels}x{size}px")
        layout = _layout(op_class)
        conv = nn.Conv2d(channels, channels, kernel, stride, kernel // 2, groups=channels,
                         bias=False)
        # its input scaled by a parameter, so the backward computes both gradients
        layer = _Scaled(conv).to(memory_format=layout)
        meta = torch.empty(batch, channels, size, size, device="meta")
        record = next(r for r in analyze(layer, meta.to(memory_format=layout),
                                         backward=True).records("backward")
                      if op_classes.op_class_of(r) == op_class)
        conv = conv.to(device)
        x = torch.randn(batch, channels, size, size, device=device).to(memory_format=layout)
        grad_out = torch.randn_like(conv(x).detach())  # in x's layout, as autograd's is
        args = (grad_out, x, conv.weight.detach(), None, conv.stride, conv.padding,
                conv.dilation, False, [0, 0], channels, [True, True, False])
        seconds = min(repeat(lambda: watch.time(
            lambda: torch.ops.aten.convolution_backward(*args)), 2, runs))
        found.setdefault(op_class, []).append(_timed_alone(record, seconds, device))
    return found


def _timed_alone(record: dict, seconds: float, device: torch.device) -> cal.Row:
    """A backward node's row where the node ran alone, again and again, on ``device``: the
    activations its step would have saved for it (calibration.Row.saved) stayed in the
    cache between runs."""
    return cal.row_of(record, seconds, layout_block(device))._replace(saved=0.0)


def pool_backward_sweep(device: torch.device, quick: bool = True,
                        progress: Optional[Callable[[str], None]] = None) -> dict:
    """{op class: [calibration.Row, ...]} of POOL_BACKWARD_PROBES on a CPU ``device``, each
    the pooling's backward node, costed by fxroof's rules and timed alone; {} on a GPU."""
    if device.type != "cpu":
        return {}
    say, watch, found = progress or (lambda message: None), Stopwatch(device), {}
    for make, shape in POOL_BACKWARD_PROBES:
        pool = make()
        say(f"probe {type(pool).__name__} backward {'x'.join(map(str, shape))}")
        record = next(r for r in analyze(_Scaled(pool), torch.empty(shape, device="meta"),
                                         backward=True).records("backward")
                      if op_classes.op_class_of(r) in op_classes.POOL_CLASSES)
        call = _pool_backward_call(pool, torch.randn(shape))
        seconds = min(repeat(lambda: watch.time(call), 2, 5 if quick else 10))
        found.setdefault(op_classes.op_class_of(record), []).append(
            _timed_alone(record, seconds, device))
    return found


def probe_rows(device: torch.device, quick: bool = True,
               progress: Optional[Callable[[str], None]] = None) -> dict:
    """{op class: [calibration.Row, ...]} of every probe, forward (sweep) and backward
    (backward_sweep, pool_backward_sweep)."""
    rows = sweep(device, quick, progress)
    for sweep_backward in (backward_sweep, pool_backward_sweep):
        for op_class, found in sweep_backward(device, quick, progress).items():
            rows.setdefault(op_class, []).extend(found)
    return rows


def fresh_rate(device: torch.device, repeats: int) -> float:
    """Bytes/s of the first touch of freshly mapped memory (a CPU's page faults, see
    hidden_bytes.fresh_bytes): ReLU of 64 MiB into a new output less the same ReLU in place
    (equal bytes read and written); 0 where the two do not differ (no such cost, or a GPU,
    whose caching allocator maps nothing per call, and in a process running tcmalloc or
    jemalloc, whose faults do not follow glibc's, the only ones fxroof replays: measured
    under tcmalloc the two ReLUs differ by cache effects alone, a "rate" of 26 GB/s that
    would price glibc's faults 8x too cheap)."""
    if device.type != "cpu" or host_allocator() != "glibc":
        return 0.0
    x, watch = torch.randn(16 * 2 ** 20), Stopwatch(device)
    fresh = min(repeat(lambda: watch.time(lambda: torch.relu(x)), 2, repeats))
    in_place = min(repeat(lambda: watch.time(lambda: x.relu_()), 2, repeats))
    return x.numel() * 4 / (fresh - in_place) if fresh > 1.05 * in_place else 0.0


def layout_rate(device: torch.device, bandwidth: float) -> float:
    """Bytes/s of a convolution's layout reorders (hidden_bytes.layout_bytes) on
    ``device``: on a CPU, its measured copy bandwidth (bytes/s), since a reorder is a copy
    that permutes as it goes; 0 on a GPU, whose cuDNN reads NCHW as it is.
    Why held, not measured: timed as the NCHW convolutions' excess over the same ones run
    channels-last, the rate moved from 7 to 50 GB/s between runs on one 2-core machine (a
    difference of two noisy timings, and the NCHW convolution's own allocations); oneDNN's
    verbose log timed the reorders themselves at 1.4-2.5x the copy bandwidth, and fitting
    the convolution classes with the rate held at 0.5, 1 and 2x the copy bandwidth,
    leave-one-model-out on that machine's nodes, was best at 1x (benchmarks/README.md)."""
    return bandwidth if device.type == "cpu" else 0.0


# 1x1 convolutions as CNNs have them, with weights of 1 MiB or more (those priced at this
# rate: hidden_bytes.STREAMED_WEIGHT_BYTES) -- (C_out, C_in, input size, stride): ResNet-50's
# bottlenecks and downsampling shortcuts and MobileNetV2's last expansion, 1-8.4 MB of
# weights. Timed alone, their reorders ran 5.5-32 GB/s on this project's CPU, and the same
# weights at another input size can get another blocked layout (512 x 2048: 5.5 GB/s for a
# 7x7 input, 14 for a 14x14 one), so the rate is measured on the layers models have.
POINTWISE_LAYERS = ((1024, 256, 14, 1), (256, 1024, 14, 1), (2048, 512, 7, 1),
                    (512, 2048, 7, 1), (2048, 1024, 14, 2), (1024, 512, 28, 2),
                    (512, 1024, 14, 1), (1280, 320, 7, 1))


def pointwise_layout_rate(device: torch.device, repeats: int = 5) -> float:
    """Bytes/s (each weight read and written once) at which oneDNN reorders a channels-last
    1x1 convolution's weights into its blocked layout, as it does on every call of an
    unfrozen one (hidden_bytes.pointwise_weights): POINTWISE_LAYERS' weights over the time
    ``torch.ops.mkldnn._reorder_convolution_weight`` (what Inductor's freezing calls once to
    prepack them) takes to reorder them all, each timed alone -- the rate of a model's set of
    1x1 weights, in which the large, slow ones weigh as much as they take (their median
    rate, 12 GB/s here against 8 for the total, would price ResNet-50's layer4 at half its
    time). 0 on a GPU, and where this torch has no oneDNN (the 1x1 weights then reorder at
    the layout rate)."""
    reorder = getattr(torch.ops.mkldnn, "_reorder_convolution_weight", None)
    if device.type != "cpu" or reorder is None or not torch.backends.mkldnn.is_available():
        return 0.0
    watch, moved, seconds = Stopwatch(device), 0, 0.0
    for out_channels, in_channels, size, stride in POINTWISE_LAYERS:
        w = torch.randn(out_channels, in_channels, 1, 1).to(memory_format=torch.channels_last)
        seconds += min(repeat(lambda: watch.time(lambda: reorder(
            w, [0, 0], [stride, stride], [1, 1], 1, [1, in_channels, size, size])), 2, repeats))
        moved += 2 * w.nbytes
    return moved / seconds


# NCHW maps at batch 8 whose channels fill no whole block of 16 or of 8 (layout_block):
# ShuffleNet's 58 and 116, and 20 and 44 -- 0.7-2.0 MB each. (channels, size)
UNEVEN_LAYERS = ((58, 28), (116, 14), (20, 56), (44, 28))


def uneven_layout_rate(device: torch.device, repeats: int = 5) -> float:
    """Bytes/s (each element read and written once) at which oneDNN reorders a convolution's
    result back from its blocked layout where its channels fill no whole block
    (hidden_bytes.unblocked_result_bytes): UNEVEN_LAYERS' outputs of a 1x1 convolution run
    on oneDNN tensors, which keep its blocked result, each turned back into a plain tensor
    (``to_dense``, the same reorder an NCHW convolution ends with), over the time those
    take, each timed alone. On this project's AVX-512 CPU they ran 16-23 GB/s where 48, 64
    and 128 channels ran 84-95. 0 on a GPU, where this torch has no oneDNN, and where
    layout_block knows no block."""
    if not layout_block(device):
        return 0.0
    watch, moved, seconds = Stopwatch(device), 0, 0.0
    with torch.no_grad():
        for channels, size in UNEVEN_LAYERS:
            x = torch.randn(8, channels, size, size)
            result = torch.ops.aten.mkldnn_convolution(
                x.to_mkldnn(), torch.randn(channels, channels, 1, 1).to_mkldnn(), None,
                [0, 0], [1, 1], [1, 1], 1)
            seconds += min(repeat(lambda: watch.time(result.to_dense), 2, repeats))
            moved += 2 * x.nbytes
    return moved / seconds


# On a GPU the classes fitted as NeuSight's kernel sweeps are (benchmarks/
# calibrate_gpu_kernels.py): GEMMs and convolutions on the device's tiles and
# multiprocessors; the memory-bound classes with a fixed cost that overlaps the kernel
# (the host's work after the launch runs beside it) and memory held at the rate of their
# probes far larger than the L2; a convolution's memory at the elementwise class's rate.
GPU_MEMORY_FROM = {c: "elementwise" for c in op_classes.CONV_CLASSES}
# A class whose fixed cost is another's, held: a transcendental activation is dispatched as
# any elementwise op is (one TensorIterator loop), and only its per-element rate differs.
# Fitted on its probes alone, which repeat one op in a loop, the math class's t0 came out
# 9 us on this project's CPU, where the elementwise class's, fitted on 948 rows most of them
# models' nodes, was 31 -- and an SE block's small sigmoids inside a model took 30 us each.
T0_FROM = {"math": "elementwise"}
# streaming probes per class a GPU's fit needs to hold its memory rate (streaming_probes
# gives two of each class, and elementwise four)
GPU_STREAMING_MIN_ROWS = 2
# A CPU's BLAS packs both operands of a product on every call (calibration.utilization's
# pack_half): fitted for the GEMM class, whose rows span 2 to 3,136 output rows; the
# matrix-vector class runs no packed kernel.
PACKED = ("gemm",)


def fit_classes(rows: dict, chip: Chip, fresh: float, source: str,
                layout: float = 0.0, pointwise_layout: float = 0.0,
                gpu: Optional[GpuShape] = None, uneven_layout: float = 0.0,
                block: int = 0) -> dict:
    """A chip entry's calibration: per op class of ``rows`` ({class: [calibration.Row,
    ...]}), the fitted parameters with their band and ``source``. GEMMs and convolutions also
    fit how their rate rises with the reduction length k. ``fresh``, ``layout``,
    ``pointwise_layout`` and ``uneven_layout``: the device's measured first-touch,
    layout-reorder, 1x1 weight-transpose and uneven-result reorder rates (bytes/s; 0: none),
    held; ``block``: the channels a block of its convolutions' layout (the rows' uneven
    bytes were counted with it). ``gpu``: the device is that GPU, fitted as
    op_classes.TILED_CLASSES and GPU_MEMORY_FROM say (else a CPU, with a cache)."""
    entries, fitted = {}, {}
    # a class whose memory rate or fixed cost is another's is fitted after it
    for op_class in sorted(rows, key=lambda c: c in T0_FROM or (gpu is not None
                                                                and c in GPU_MEMORY_FROM)):
        params, ratio = _fit_class(op_class, [cal.Row(*row) for row in rows[op_class]], chip,
                                   fresh, Reorders(layout, pointwise_layout, uneven_layout,
                                                   block), gpu, fitted)
        fitted[op_class] = params
        entries[op_class] = cal.probe_entry(params, ratio, f"{source}: {len(ratio)} "
                                                           "measurements of this class")
    return entries


class Reorders(NamedTuple):
    """A device's measured layout-reorder rates (bytes/s; 0: none) and the channels a block
    of its convolutions' layout, as fit_classes takes them."""

    layout: float
    pointwise: float
    uneven: float
    block: int


def _fit_class(op_class: str, found: list, chip: Chip, fresh: float, reorders: Reorders,
               gpu: Optional[GpuShape], fitted: dict) -> tuple:
    """(calibration.Params, measured / predicted per row) of one class (fit_classes)."""
    def column(name):
        return np.array([getattr(row, name) for row in found], dtype=float)

    flops, nbytes, fresh_bytes, seconds, k = (column(name) for name in (
        "flops", "bytes", "fresh", "seconds", "k"))
    moved, moved_fresh, pointwise, saved, uneven, in_place = (column(name) for name in (
        "layout", "layout_fresh", "pointwise", "saved", "uneven", "in_place"))
    reordered = reorders.layout if op_class in hidden_bytes.REORDERED_CLASSES else 0.0
    # the 1x1 weight transposes of channels-last convolutions (hidden_bytes.pointwise_weights)
    own = reorders.pointwise if reordered and op_class == "conv_cl" else 0.0
    # results of uneven channels reordered back (hidden_bytes.unblocked_result_bytes)
    uneven_rate = reorders.uneven if reordered and reorders.block else 0.0
    rates = cal.layout_rates(reordered, own, uneven_rate, pointwise, moved, uneven)
    conv = op_class in op_classes.CONV_CLASSES
    matrix = op_class in op_classes.MATRIX_CLASSES
    peak, _ = peak_for(chip, "matrix" if matrix else "vector", "float32",
                       "convolution" if conv else "")
    tiled = gpu is not None and op_class in op_classes.TILED_CLASSES
    units = gpu.units if tiled else None
    dims = None
    if tiled:  # each row's own (batch, m, n, k): the tiles it is cut in
        dims = tuple(np.array(d, dtype=float) for d in zip(
            *(row.dims or (1, 1, 1, row.k) for row in found)))
    elif matrix:  # the product's own rows and columns, for its operands' packing (gemm)
        dims = tuple(np.array(d, dtype=float) for d in zip(
            *(row.dims or (1, math.inf, math.inf, row.k) for row in found)))
        # k: reduction_length's, not gemm_dims' (read off the FLOPs, it counts half an
        # element more for a bias)
        dims = (*dims[:3], k)
    options = {"cache": gpu is None, "fresh": fresh_bytes, "fresh_rate": fresh,
               "offset": cal.reorder_seconds(rates, fresh, moved, moved_fresh), "saved": saved,
               # a GPU's cache fetches no line to write it: its in-place probes fit as any
               # other
               "in_place": in_place if gpu is None else 0.0}
    if op_class in T0_FROM and T0_FROM[op_class] in fitted:
        options["t0"] = fitted[T0_FROM[op_class]].t0
    if gpu is not None:
        borrowed = fitted.get(GPU_MEMORY_FROM.get(op_class))
        memory = borrowed.memory if borrowed else None if matrix else cal.streaming_fraction(
            nbytes, seconds, chip.bandwidth, gpu.l2_bytes, GPU_STREAMING_MIN_ROWS)
        options.update(tiles=cal.tiling(op_class), k_rise=conv, memory=memory,
                       overlap=not matrix)
    params = cal.fit(flops, nbytes, seconds, peak, chip.bandwidth, dims=dims, units=units,
                     compute_cap=2.25 if conv else 1.0, pack=gpu is None and op_class in PACKED,
                     **options)
    params = dataclasses.replace(params, layout_rate=reordered, pointwise_layout_rate=own,
                                 uneven_layout_rate=uneven_rate,
                                 layout_block=float(reorders.block) if uneven_rate else 0.0,
                                 small_tile=params.small_tile if tiled else 1.0)
    used = cal.utilization(*dims, units, params.small_tile, params.k_half,
                           cal.tiling(op_class), params.pack_half) if matrix else 1.0
    ratio = seconds / (cal.predict(flops, nbytes, peak, chip.bandwidth,
                                   dataclasses.replace(params, layout_rate=0.0), used,
                                   fresh_bytes, saved=saved, in_place=in_place)
                       + cal.reorder_seconds(rates, fresh, moved, moved_fresh))
    return params, ratio


def calibrate(device: str, chip: Chip, quick: bool = True,
              progress: Optional[Callable[[str], None]] = None, compiled: bool = False,
              models=()) -> dict:
    """Fitted parameters per op class for ``device`` (measured as ``chip``), as a chip
    entry's ``calibration``: t0 (s), compute and memory fractions, the band of measured /
    predicted on what they were fitted on, and the source. Fractions are of the peak the
    roofline uses for fp32 ops of the class on this chip, and of its bandwidth.
    ``compiled``: also calibrate the kernels torch.compile generates (fxroof.compiled_probes;
    compiles each probe). ``models``: also fit on the nodes of these runs
    (fxroof.model_probes.Run), timed node by node -- on a CPU only: a GPU's timing pass
    times a node with events around its kernel, without the host's fixed cost that each
    probe and the time model's t0 hold, so one t0 could not fit both (and what the runs
    teach a CPU's fit -- cold weights, page faults, layout reorders -- a GPU does not pay
    that way)."""
    dev = check_device(device)
    gpu = gpu_shape(dev)
    say = progress or (lambda message: None)
    if gpu is not None and models:
        say("calibration models skipped: a GPU is fitted on its probes alone")
        models = ()
    if gpu is not None and compiled:
        # the compiled probes time Inductor's C++ kernels; a GPU's Triton kernels are priced
        # with its elementwise class (the "fused" class falls back to it), fitted on its probes
        say("compiled probes skipped: they time a CPU's generated kernels")
        compiled = False
    # ten repeats even when quick (about 0.5 s more): with three, one study's chip measured
    # 0.41 GB/s where every other measurement of that machine gave 3.2-3.4, and priced each
    # large output's page faults 8x too high (alexnet's training step at 5.8x its time)
    faults = fresh_rate(dev, 10)
    rows = probe_rows(dev, quick, progress)
    for op_class, found in model_rows(device, models, progress=progress).items():
        rows.setdefault(op_class, []).extend(found)
    source = f"fxroof chips measure on {device}: probes" + (
        " and the nodes of " + ", ".join(map(str, models)) if models else "")
    entries = fit_classes(rows, chip, faults, source, layout=layout_rate(dev, chip.bandwidth),
                          pointwise_layout=pointwise_layout_rate(dev, 5 if quick else 15),
                          gpu=gpu, uneven_layout=uneven_layout_rate(dev, 5 if quick else 15),
                          block=layout_block(dev))
    if compiled:
        # deferred: it imports Inductor, about 2 s that a quick calibration does not need
        from fxroof.compiled_probes import calibrate_generated
        peak, _ = peak_for(chip, "vector", "float32", "")
        entries.update(calibrate_generated(dev, peak, chip.bandwidth, quick, progress, faults))
    return entries


def measure_calibrated(device: str = "cpu", quick: bool = True,
                       progress: Optional[Callable[[str], None]] = None,
                       compiled: bool = False, models=()) -> dict:
    """A chip entry with this device's measured roofs (fxroof.measure) and its calibrated
    time model (``calibration``), ready to save as a user chip."""
    entry = measure(device, quick, progress)
    entry["calibration"] = calibrate(device, parse_chip(entry, "(measured)"), quick, progress,
                                     compiled, models)
    return entry


def measure_calibrated_in_fresh_process(device: str, allocator: str) -> dict:
    """measure_calibrated(device) (quick), in a new interpreter running ``allocator``
    (fxroof.latency.in_fresh_process): the roofs and rates of a process that allocates as
    the measured ones do. FxroofError if the child failed."""
    result = in_fresh_process("fxroof.probes", {"device": device},
                              f"the roofs of {device}", allocator)
    if "error" in result:
        raise FxroofError(result["error"])
    return {k: v for k, v in result.items() if k not in ("process", "host_allocator")}


def _child(request: dict) -> dict:
    try:
        return measure_calibrated(request["device"], quick=True)
    except Exception as e:  # reported to the parent as one line
        return error_record(e)


if __name__ == "__main__":
    child_main(_child)
