"""Roofline maths over an annotated graph's node records.

For a node with F FLOPs and B bytes on a chip with peak P (for the node's engine and dtype)
and bandwidth W:  attainable FLOP/s = min(P, W * F/B);  predicted time = max(F/P, B/W), plus,
on a chip measured by `fxroof chips measure`, its measured per-op overhead O for every node
that launches work (datasheet chips have none); the node is compute-bound when F/P >= B/W.
The ridge point of a roof is P/W FLOP/byte.

Which peak: matrix-class ops (convolution, matmul, attention) use the matrix engine's peak
for their dtype; on GPUs, fp32 convolutions use TF32 when ``torch.backends.cudnn.allow_tf32``
is on (PyTorch's default) and fp32 matmuls when ``torch.backends.cuda.matmul.allow_tf32`` is
(default off). Everything else uses the vector peak for its dtype, or the fp32 vector peak
when the chip lists none for that dtype, or -- on accelerators that publish only matrix peaks --
the dtype's matrix peak. Model-level intensity is total FLOPs / total bytes.

The roof is the ceiling, not the expectation: a node's expected time is
fxroof.time_model's, and fxroof.prediction writes both into a graph and sums a step.
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple, Optional

import torch

from fxroof import calibration as cal, op_classes
from fxroof.chips import Chip
from fxroof.errors import MissingPeakError, UsageError
from fxroof.units import peak_key

ROOFS = ("calibrated", "ideal")


def check_roof(roof: str) -> str:
    if roof not in ROOFS:
        raise UsageError(f"roof must be one of {', '.join(ROOFS)}, not {roof!r}.")
    return roof


def tf32_enabled(op: str) -> bool:
    if op.startswith("convolution"):
        return torch.backends.cudnn.allow_tf32
    return torch.backends.cuda.matmul.allow_tf32


@contextlib.contextmanager
def cudnn_search(on: bool = True):
    """``torch.backends.cudnn.benchmark`` at ``on`` for the duration: predictions made
    inside read it (cudnn_searched), and so does cuDNN on a GPU."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def cudnn_searched() -> bool:
    """Whether cuDNN searches its engines for each convolution shape (PyTorch's
    ``torch.backends.cudnn.benchmark``: off by default; on in timm's, NVIDIA's and torchvision's
    training and benchmark scripts, and set by ``--cudnn-benchmark``): on a GeForce board it
    then finds kernels that write NCHW results themselves (searched_result_layout)."""
    return bool(torch.backends.cudnn.benchmark)


def searched_result_layout(chip: Chip) -> bool:
    """Whether cuDNN's engine search (cudnn_searched) finds, on this GPU, convolutions that
    write their NCHW result themselves, sparing its transpose: on GeForce boards, where
    public traces show such kernels picked (hidden_bytes.TRANSPOSED_CLASSES) and timm's
    layout ratios fit it (benchmarks/README.md). Not on a datacenter board: on the
    workplace's H200 (cuDNN 9.19) the search left 17 models' steps at a median 0.97-1.00
    of their unsearched times, batch by batch, where sparing the results' transposes
    prices NCHW networks at 0.85-0.96 (benchmarks/measured/h200-run3-cudnn-benchmark.json
    against h200-run1/2.json)."""
    return cudnn_searched() and cal.geforce(chip.name)


def roof_key(chip: Chip, dtype: str) -> Optional[str]:
    """The peak a figure draws as a chip's roof for a dtype: its matrix engine's where it
    has one, else its plain peak; None when the chip lists neither."""
    return next((k for k in (f"{dtype}_matrix", dtype) if k in chip.peaks), None)


def tf32_convolution_roof(chip: Chip, dtype: str) -> bool:
    """Whether the roof of fp32 convolutions on this chip is its TF32 tensor-core peak (a GPU
    with TF32, and PyTorch's cuDNN flag at its default, on): figures draw it beside the fp32
    roof, so a convolution is never shown above a roof its maths did not use."""
    return dtype == "fp32" and chip.cls == "gpu" and "tf32" in chip.peaks \
        and tf32_enabled("convolution")


def peak_for(chip: Chip, op_class: str, dtype: Optional[str], op: str = "") -> tuple[float, str]:
    """(peak FLOP/s, the peaks key used) for an op of this class and dtype on this chip."""
    key = peak_key(dtype)
    if op_class == "matrix":
        candidates = [f"{key}_matrix", key]
        if key == "fp32" and chip.cls == "gpu" and tf32_enabled(op):
            candidates.insert(0, "tf32")
    else:
        candidates = [key] if chip.units.get(key) == "vector" else []
        # Accelerators that publish only matrix-engine peaks (TPUs, Gaudi's MME figure) get
        # that peak as the bound of vector work too: optimistic for compute, but such work is
        # memory-bound, so its predicted time is the bandwidth term either way.
        candidates += ["fp32", key]
    for candidate in candidates:
        if candidate in chip.peaks:
            return chip.peaks[candidate], candidate
    needed = f"{key} peak for {op_class} work"
    raise MissingPeakError(f"Chip '{chip.id}' has no {needed}; it lists "
                           f"{', '.join(sorted(chip.peaks))}. Analyse the model in one of "
                           "those dtypes (--dtype, or --amp for mixed precision) or choose "
                           "another chip.",
                           chip.id, needed, sorted(chip.peaks))


class NodeRoof(NamedTuple):
    peak: float              # FLOP/s of the roof that applies
    peak_key: str            # e.g. "tf32", "bf16", "fp32"
    attainable: float        # FLOP/s: min(peak, bandwidth * intensity)
    predicted_s: float       # max(flops / peak, bytes / bandwidth)
    bound: str               # "compute" | "memory"


def engine_class(record: dict, chip: Chip) -> str:
    """The op class whose peak bounds a node on this chip: its own, but a depthwise or a
    narrow convolution on a GPU is bounded by the CUDA cores ("vector"): the tensor cores
    multiply tiles of at least 8 input channels, and a depthwise filter sees one (cuDNN's
    and ATen's depthwise kernels are CUDA-core kernels), a stem's 3 (on an H100, resnet50's
    7x7 stem ran 23 TFLOP/s in bf16 and 20 in TF32, vit_b_16's patch embedding 26 in bf16:
    a third of the FP32 CUDA-core peak, a fortieth of the BF16 tensor-core one)."""
    if chip.cls == "gpu" and (op_classes.depthwise(record) or op_classes.narrow(record)):
        return "vector"
    return record["op_class"]


def node_roof(record: dict, chip: Chip) -> NodeRoof:
    peak, key = peak_for(chip, engine_class(record, chip), record["dtype"], record["op"])
    compute_s = record["flops"] / peak
    memory_s = record["bytes"] / chip.bandwidth
    attainable = min(peak, chip.bandwidth * record["flops"] / record["bytes"]) \
        if record["bytes"] else peak
    # a measured chip knows what one eager op costs before any FLOP or byte: views launch
    # no kernel, every other node pays it once
    overhead = (chip.op_overhead_s or 0.0) if record["op_class"] != "view" else 0.0
    return NodeRoof(peak, key, attainable, max(compute_s, memory_s) + overhead,
                    "compute" if compute_s >= memory_s else "memory")


def ridge_point(chip: Chip, peak_key: str) -> float:
    """FLOP/byte at which this roof's compute ceiling meets the bandwidth slope."""
    return chip.peaks[peak_key] / chip.bandwidth
