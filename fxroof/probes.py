"""Calibrating the time model on the local device: time one small module per probe, cost it
with fxroof's own rules, and fit fxroof.calibration's parameters per op class.

The probes cover each class the model distinguishes -- GEMMs (square, skinny, batched),
convolutions (dense 3x3, 1x1, depthwise, strided), elementwise ops, norms (batch and layer
norm) and softmax -- over sizes from a few microseconds to tens of milliseconds, so both the
fixed cost per op and the sustained rates are seen. Each probe runs eagerly under no_grad,
as a model's layers do, and its time is the fastest of its repeats (a sustained rate, not a
busy machine's median). FLOPs and bytes come from ``fxroof.analyze`` of the same module, so
the fitted fractions are fractions of exactly what fxroof predicts with.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

from fxroof import calibration as cal
from fxroof.analysis import analyze
from fxroof.chips import Chip, parse_chip
from fxroof.compiled_probes import calibrate_fused
from fxroof.device import Stopwatch, check_device, repeat
from fxroof.measure import measure
from fxroof.roofline import peak_for

# (op class, label, module factory, input shape)
PROBES = [
    *[("gemm", f"linear {n}x{n}x{n}", lambda n=n: nn.Linear(n, n, bias=False), (n, n))
      for n in (32, 64, 128, 256, 512, 1024, 2048)],
    *[("gemm", f"linear {m}x{k}x{n}", lambda k=k, n=n: nn.Linear(k, n, bias=False), (m, k))
      for m, k, n in ((1, 1024, 1024), (8, 4096, 1024), (1024, 64, 1024), (256, 256, 2048),
                      (1, 9216, 4096), (8, 4096, 4096))],  # the last two stream their weights
    *[("conv", f"conv3x3 c{c} {s}px", lambda c=c: nn.Conv2d(c, c, 3, padding=1, bias=False),
       (1, c, s, s)) for c, s in ((16, 16), (32, 32), (64, 28), (64, 56), (128, 28), (256, 14))],
    *[("conv", f"conv1x1 c{c} {s}px", lambda c=c: nn.Conv2d(c, 2 * c, 1, bias=False),
       (1, c, s, s)) for c, s in ((32, 56), (128, 28), (256, 14))],
    *[("conv", f"depthwise c{c} {s}px",
       lambda c=c: nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), (1, c, s, s))
      for c, s in ((32, 56), (96, 28), (192, 14), (384, 7))],
    ("conv", "conv7x7/2 c3 224px", lambda: nn.Conv2d(3, 64, 7, 2, 3, bias=False),
     (1, 3, 224, 224)),
    *[("elementwise", f"relu {n}", lambda: nn.ReLU(), (n,))
      for n in (256, 4096, 65536, 2 ** 20, 2 ** 23)],
    *[("elementwise", f"gelu {n}", lambda: nn.GELU(), (n,)) for n in (4096, 2 ** 20)],
    *[("norm", f"batchnorm c{c} {s}px", lambda c=c: nn.BatchNorm2d(c).eval(), (1, c, s, s))
      for c, s in ((16, 16), (64, 56), (256, 14), (128, 56))],
    *[("norm", f"layernorm {r}x{c}", lambda c=c: nn.LayerNorm(c), (r, c))
      for r, c in ((8, 64), (128, 768), (1024, 1024))],
    *[("softmax", f"softmax {r}x{c}", lambda: nn.Softmax(dim=-1), (r, c))
      for r, c in ((8, 64), (128, 512), (1024, 1024), (4096, 2048))],
]


# The convolution probes again, channels-last (the layout Inductor gives a CPU convolution,
# and `--memory-format channels_last`'s): oneDNN runs these without the reorders an NCHW
# convolution pays on the way in and out, so they have rates of their own.
PROBES += [("conv_cl", label + " channels-last", make, shape)
           for op_class, label, make, shape in PROBES if op_class == "conv"]


def _layout(op_class: str) -> torch.memory_format:
    return torch.channels_last if op_class == "conv_cl" else torch.contiguous_format


def _cost(module: nn.Module, shape: tuple, op_class: str) -> tuple[int, int]:
    """(FLOPs, bytes) of the probe's nodes of ``op_class``, by fxroof's own cost rules."""
    g = analyze(module, torch.empty(shape, device="meta").to(memory_format=_layout(op_class)))
    nodes = [r for r in g.records() if cal.op_class_of(r) == op_class]
    return sum(r["flops"] for r in nodes), sum(r["bytes"] for r in nodes)


def sweep(device: torch.device, quick: bool = True,
          progress: Optional[Callable[[str], None]] = None) -> dict:
    """{op class: (flops, bytes, seconds) arrays} measured on ``device``."""
    say = progress or (lambda message: None)
    repeats = 3 if quick else 15
    watch = Stopwatch(device)
    found: dict = {}
    for op_class, label, make, shape in PROBES:
        say(f"probe {label}")
        module = make().to(device, memory_format=_layout(op_class))
        flops, nbytes = _cost(module, shape, op_class)
        x = torch.randn(shape, device=device).to(memory_format=_layout(op_class))
        with torch.no_grad():
            seconds = min(repeat(lambda: watch.time(lambda: module(x)), 2, repeats))
        found.setdefault(op_class, []).append((flops, nbytes, seconds))
    return {c: tuple(np.array(column, dtype=float) for column in zip(*rows))
            for c, rows in found.items()}


def calibrate(device: str, chip: Chip, quick: bool = True,
              progress: Optional[Callable[[str], None]] = None, compiled: bool = False) -> dict:
    """Fitted parameters per op class for ``device`` (measured as ``chip``), as a chip
    entry's ``calibration``: t0 (s), compute and memory fractions, the band of measured /
    predicted on the probes, and the source. Fractions are of the peak the roofline uses for
    fp32 ops of the class on this chip, and of its bandwidth. ``compiled``: also calibrate
    the kernels torch.compile generates (fxroof.compiled_probes; compiles each probe)."""
    dev = check_device(device)
    measured = sweep(dev, quick, progress)
    entries = {}
    for op_class, (flops, nbytes, seconds) in measured.items():
        conv = op_class in ("conv", "conv_cl")
        kind = "matrix" if conv or op_class == "gemm" else "vector"
        peak, _ = peak_for(chip, kind, "float32", "convolution" if conv else "")
        params = cal.fit(flops, nbytes, seconds, peak, chip.bandwidth,
                         compute_cap=2.25 if conv else 1.0, cache=True)
        ratio = seconds / cal.predict(flops, nbytes, peak, chip.bandwidth, params)
        entries[op_class] = {
            "t0": float(f"{params.t0:.4g}"), "compute": round(params.compute, 4),
            "memory": round(params.memory, 4), "small_tile": 1.0,
            "cache_bytes": float(f"{params.cache_bytes:.4g}"),
            "cache_memory": round(params.cache_memory, 4),
            "band": [round(float(np.percentile(ratio, 10)), 3),
                     round(float(np.percentile(ratio, 90)), 3)],
            "source": f"fxroof chips measure: {len(seconds)} probes of this class on "
                      f"{device}, MAPE {float(np.mean(np.abs(1 / ratio - 1))) * 100:.1f}%"}
    if compiled:
        peak, _ = peak_for(chip, "vector", "float32", "")
        entries["fused"] = calibrate_fused(dev, peak, chip.bandwidth, quick, progress)
    return entries


def measure_calibrated(device: str = "cpu", quick: bool = True,
                       progress: Optional[Callable[[str], None]] = None,
                       compiled: bool = False) -> dict:
    """A chip entry with this device's measured roofs (fxroof.measure) and its calibrated
    time model (``calibration``), ready to save as a user chip."""
    entry = measure(device, quick, progress)
    entry["calibration"] = calibrate(device, parse_chip(entry, "(measured)"), quick, progress,
                                     compiled)
    return entry
