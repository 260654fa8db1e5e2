"""Calibrating the kernels torch.compile generates on the local device (the "fused" class).

fxroof's eager classes are fitted on eager modules: each op pays a Python module call and
the dispatcher, and reads and writes its tensors once per op. A kernel Inductor generates
pays neither -- its wrapper calls it directly -- and it is vectorised code over a whole
fused chain, so the compiled view needs rates of its own. The probes compile small modules
with Inductor (the same ``torch.compile`` a user runs), time them, and take their kernels'
FLOPs and bytes from fxroof's compiled view of the same module (fxroof.compiled), so the
fitted rates are rates of exactly what the view predicts with.

A compiled call costs a fixed amount per call (guards, the wrapper) plus each kernel's
time. Chains of 1 to 8 tiny softmaxes (a few kernels each) separate the two: their times
against their kernel counts give the cost per kernel (the slope, ``t0``) and per call (the
intercept), each the fastest of many calls. The sized probes (pointwise chains, row sums,
softmax, layer norm; and a CNN's kernels: inference batch norm + ReLU, residual add + ReLU,
max and average pools, global means, hardswish; 4 KB to 100 MB) then give the sustained
compute, bandwidth and cache rates with ``t0`` held, the per-call cost held beside them.
A max pool over NCHW maps is among them: Inductor cannot vectorise it (fxroof.compiled),
so its FLOPs are priced at one lane of the vector unit, ``vector_lanes`` (Inductor's own
vector ISA, recorded with the fit) times slower than the rest.

Copies across a transpose are a class of their own ("transpose", fxroof.compiled's
transposing kernels), fitted on probes of what CNNs compile to: an image made channels-last,
convolution weights converted to channels-last (what unfrozen compilation does every call),
a channels-last map made NCHW and a (C, H x W) map transposed. They move no FLOPs, so the
class keeps the fused class's compute rate for the arithmetic fused into such a kernel.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np
import torch
from torch import nn
from torch._inductor.cpu_vec_isa import pick_vec_isa

from fxroof import calibration as cal, hidden_bytes, op_classes
from fxroof.analysis import analyze
from fxroof.device import Stopwatch, repeat


class _Chain(nn.Module):
    """``steps`` softmaxes over alternate dimensions of a tiny input: a few kernels each
    (Inductor fuses reductions along one dimension into one kernel, not across a
    transpose)."""

    def __init__(self, steps: int):
        super().__init__()
        self.steps = steps

    def forward(self, x):
        for _ in range(self.steps):
            x = torch.softmax(x, 0).t().contiguous()
        return x


class _Pointwise(nn.Module):
    def forward(self, x):
        return (x * 2 + 1).relu()


class _RowSum(nn.Module):
    def forward(self, x):
        return x.sum(-1)


class _BatchNormReLU(nn.Sequential):
    def __init__(self, channels: int):
        super().__init__(nn.BatchNorm2d(channels), nn.ReLU())
        self.eval()


class _ResidualReLU(nn.Module):
    """A residual block's end, (x + identity).relu(): two channels-last tensors read, one
    written (the identity is a buffer, an input of the compiled graph)."""

    def __init__(self, shape: tuple):
        super().__init__()
        self.register_buffer("identity",
                             torch.randn(shape).to(memory_format=torch.channels_last))

    def forward(self, x):
        return (x + self.identity).relu()


class _Relayout(nn.Module):
    """A copy into another layout: channels-last (``dims`` None), or the input's dimensions
    permuted and made contiguous -- a transposing kernel (fxroof.compiled)."""

    def __init__(self, dims: Optional[tuple] = None):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        if self.dims is None:
            return x.contiguous(memory_format=torch.channels_last)
        return x.permute(self.dims).contiguous()


class _GlobalMean(nn.Module):
    """A classifier head's (or squeeze-excitation's) mean over the map."""

    def forward(self, x):
        return x.mean((2, 3))


CHAINS = (1, 2, 4, 8)
# (label, module factory, input shape, channels-last input). Beside pointwise chains and
# reductions of 4 KB-64 MB, the generated kernels CNNs are made of, at the sizes of
# torchvision's CNNs at batches 1 and 8: batch norm + ReLU, a residual add + ReLU, the
# stem's max pool and Inception's 3x3 average pool (windowed: several reads and compares or
# adds per output, where the pointwise probes leave the compute rate unconstrained), a
# global mean and a hardswish.
SIZED = [
    *[(f"x*2+1 relu {n}", _Pointwise, (n,), False) for n in (1024, 65536, 2 ** 20, 2 ** 23)],
    *[(f"row sum {r}x{c}", _RowSum, (r, c), False) for r, c in ((128, 512), (4096, 2048))],
    *[(f"softmax {r}x{c}", lambda: nn.Softmax(-1), (r, c), False)
      for r, c in ((128, 512), (1024, 1024), (4096, 2048))],
    *[(f"layernorm {r}x{c}", lambda c=c: nn.LayerNorm(c), (r, c), False)
      for r, c in ((128, 768), (1024, 1024))],
    *[(f"batchnorm+relu c{c} {s}px b{b}", lambda c=c: _BatchNormReLU(c), (b, c, s, s), True)
      for b, c, s in ((1, 64, 56), (1, 256, 14), (8, 64, 56), (8, 64, 112))],
    *[(f"add+relu c{c} {s}px b{b}", lambda b=b, c=c, s=s: _ResidualReLU((b, c, s, s)),
       (b, c, s, s), True) for b, c, s in ((1, 256, 56), (8, 256, 56))],
    *[(f"max pool 3x3/2 b{b}", lambda: nn.MaxPool2d(3, 2, 1), (b, 64, 112, 112), True)
      for b in (1, 8)],
    # the same pool over NCHW maps, as Inductor leaves a pool after a concatenation
    # (SqueezeNet's, DenseNet's): unvectorised, one lane at a time
    *[(f"max pool 3x3/2 NCHW b{b}", lambda: nn.MaxPool2d(3, 2, 1), (b, 64, 112, 112), False)
      for b in (1, 8)],
    *[(f"avg pool 3x3/1 b{b}", lambda: nn.AvgPool2d(3, 1, 1), (b, 192, 35, 35), True)
      for b in (1, 8)],
    *[(f"mean c{c} b{b}", _GlobalMean, (b, c, 7, 7), True) for b, c in ((1, 2048), (8, 1280))],
    ("hardswish c96 56px b8", nn.Hardswish, (8, 96, 56, 56), True),
]


# (label, module factory, input shape, channels-last input): the transposing copies CNNs
# compile to, 0.2-170 MB moved -- the image made channels-last at batch 1 and 8, a 3x3
# convolution's weights made channels-last (its 9 taps, shorter than a tile) at three widths,
# a channels-last map made NCHW (ShuffleNet's channel shuffle reads one so), and a
# (channels, positions) map transposed.
TRANSPOSES = [
    *[(f"image to channels-last b{b}", _Relayout, (b, 3, 224, 224), False) for b in (1, 8)],
    *[(f"3x3 weights {c}x{c} to channels-last", _Relayout, (c, c, 3, 3), False)
      for c in (64, 256, 512)],
    ("channels-last c116 28px b8 to NCHW", lambda: _Relayout((0, 1, 2, 3)), (8, 116, 28, 28),
     True),
    *[(f"c64 x 3136 transposed b{b}", lambda: _Relayout((0, 2, 1)), (b, 64, 3136), False)
      for b in (1, 8)],
]


def _input(shape: tuple, channels_last: bool, device) -> torch.Tensor:
    x = torch.randn(shape, device=device)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _kernels(module: nn.Module, shape: tuple, channels_last: bool) -> list[dict]:
    """The generated kernels of the module's compiled view (records), of either class."""
    graph = analyze(module, _input(shape, channels_last, "meta"), compiled=True)
    return [r for r in graph.records() if op_classes.generated(r)]


def _seconds(module: nn.Module, x: torch.Tensor, watch: Stopwatch, repeats: int) -> float:
    """Seconds per compiled call after the compile: the fastest of the repeats (a sustained
    rate, as for the eager probes)."""
    torch._dynamo.reset()  # static shapes: no recompile of an earlier probe as dynamic
    compiled = torch.compile(module)
    with torch.no_grad():
        times = repeat(lambda: watch.time(lambda: compiled(x)), 3, repeats)
    torch._dynamo.reset()
    return float(min(times))


def call_costs(device: torch.device, repeats: int, say: Callable[[str], None]) -> tuple:
    """(seconds per compiled call, seconds per generated kernel), fitted on chains of tiny
    kernels: time = per call + kernels x per kernel."""
    watch, counts, times = Stopwatch(device), [], []
    for steps in CHAINS:
        say(f"compiled probe: chain of {steps} softmaxes")
        module = _Chain(steps)
        counts.append(len(_kernels(module, (8, 8), False)))
        times.append(_seconds(module, torch.randn(8, 8, device=device), watch, 20 * repeats))
    per_kernel, per_call = np.polyfit(np.array(counts, dtype=float), np.array(times), 1)
    return max(float(per_call), 0.0), max(float(per_kernel), 1e-7)


def vector_lanes(device: torch.device) -> int:
    """fp32 elements per vector of the C++ Inductor generates on ``device`` (its vector ISA:
    16 with AVX-512, 8 with AVX2), 1 where it generates no vector code; 0 on a GPU (Triton
    kernels, not modelled so)."""
    if device.type != "cpu":
        return 0
    isa = pick_vec_isa()  # Inductor's own choice of ISA
    return int(isa.nelements(torch.float)) if isa else 1


def sweep(device: torch.device, repeats: int, say: Callable[[str], None],
          lanes: int = 1, probes=SIZED) -> tuple:
    """(flops, bytes, fresh bytes, seconds, kernels) arrays, one entry per probe (SIZED or
    TRANSPOSES): its kernels' sums, its time per compiled call, and its kernel count. An
    unvectorised kernel's FLOPs count ``lanes`` times: at the vector peak they take as long
    as its FLOPs take at one lane (the time model's scalar rate, fxroof.roofline)."""
    watch, rows = Stopwatch(device), []
    for label, make, shape, channels_last in probes:
        say(f"compiled probe: {label}")
        module = make().to(device)
        kernels = _kernels(module, shape, channels_last)
        seconds = _seconds(module, _input(shape, channels_last, device), watch, repeats)
        flops = sum(r["flops"] * (lanes if op_classes.unvectorised(r) else 1)
                    for r in kernels)  # a scalar kernel's count ``lanes`` times (above)
        rows.append((flops, sum(r["bytes"] for r in kernels),
                     sum(hidden_bytes.fresh_bytes(r) for r in kernels), seconds, len(kernels)))
    return tuple(np.array(column, dtype=float) for column in zip(*rows))


def calibrate_generated(device: torch.device, peak: float, bandwidth: float, quick: bool,
                        progress: Optional[Callable[[str], None]] = None,
                        fresh_rate: float = 0.0) -> dict:
    """The "fused" and "transpose" classes of a chip entry's calibration, each: t0 (s, per
    kernel), the fitted fractions and cache, the band of measured / predicted on its probes,
    and the source. ``fresh_rate``: the device's first-touch rate (fxroof.probes.fresh_rate),
    held."""
    say = progress or (lambda message: None)
    repeats = 3 if quick else 10
    per_call, per_kernel = call_costs(device, repeats, say)
    lanes = max(vector_lanes(device), 1)
    where = (f"on {device}; t0 per kernel, and {per_call * 1e6:.1f} us per compiled call "
             f"(not in t0), from chains of {CHAINS[0]}-{CHAINS[-1]} softmaxes")

    def fitted(probes, what: str, compute: Optional[float] = None) -> tuple:
        flops, nbytes, fresh, seconds, kernels = sweep(device, repeats, say, lanes, probes)
        # a probe's call pays the per-call cost once and t0 once per kernel; the model of one
        # kernel holds one t0, the rest are held outside it. Held, not subtracted: the
        # smallest probes take about the fixed costs, and a difference within noise of 0 has
        # no logarithm.
        offset = per_call + (kernels - 1) * per_kernel
        params = cal.fit(flops, nbytes, seconds, peak, bandwidth, t0=per_kernel, cache=True,
                         fresh=fresh, fresh_rate=fresh_rate, offset=offset)
        params = dataclasses.replace(params, vector_lanes=lanes,
                                     compute=params.compute if compute is None else compute)
        ratio = seconds / (cal.predict(flops, nbytes, peak, bandwidth, params, fresh=fresh)
                           + offset)
        entry = cal.probe_entry(params, ratio, f"fxroof chips measure: {len(seconds)} "
                                               f"torch.compile (Inductor) probes of {what} "
                                               + where)
        return params, entry

    fused, fused_entry = fitted(SIZED, "generated kernels")
    # copies compute nothing: the fused class's compute rate, for what is fused into one
    _, transpose_entry = fitted(TRANSPOSES, "transposing copies", compute=fused.compute)
    return {"fused": fused_entry, "transpose": transpose_entry}
