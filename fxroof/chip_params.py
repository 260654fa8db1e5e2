"""What the time model reads of a chip: its fitted parameters per op class (its own measured
set, else the shipped calibration's for it or its family: fxroof.calibration) and, for a
GPU, its multiprocessors and SM clock, each with where it comes from.
"""
from __future__ import annotations

import functools
from typing import Optional

from fxroof import calibration as cal, launch_geometry, op_classes
from fxroof.chips import Chip


@functools.lru_cache(maxsize=1)
def calibration() -> cal.Calibration:
    return cal.load()


def params(chip: Chip, op_class: str) -> Optional[cal.Params]:
    """The chip's parameters for an op class: its own measured set (for the class, else the
    nearest class it falls back to), else the shipped ones (fxroof.calibration)."""
    fallen_back = op_class
    while chip.calibration and fallen_back is not None:
        if fallen_back in chip.calibration:
            return chip.calibration[fallen_back]
        fallen_back = op_classes.FALLBACK.get(fallen_back)
    return calibration().params(chip.id, chip.cls, op_class, chip.tdp, chip.name,
                                chip.vendor)


def vector_lanes(chip: Chip) -> float:
    """fp32 lanes of a measured CPU's vector unit (its generated kernels' class records the
    ISA Inductor picked there; oneDNN's kernels use the same), 0 where unknown."""
    generated = params(chip, "fused") if chip.cls == "cpu" else None
    return generated.vector_lanes if generated is not None else 0.0


def time_model_source(chip: Chip) -> str:
    """Where the chip's shipped GEMM parameters come from and their band, in words ("" where
    it has none: the roof alone prices it)."""
    gemm = params(chip, "gemm")
    if gemm is None:
        return ""
    low, high = gemm.band
    origin, _, fitted_on = gemm.source.rpartition(": ")
    matrix = f" ({gemm.matrix_compute:.2f} on the tensor cores)" if gemm.matrix_compute else ""
    return (f"calibrated; GEMMs at {gemm.compute:.2f} of the peak{matrix}, measured / "
            f"predicted {low:.2f}..{high:.2f}x (p10..p90), parameters of: {fitted_on} "
            f"({origin.split(' (')[0] or 'fxroof.calibration'})")


def multiprocessors(chip: Chip) -> Optional[int]:
    """A GPU's SMs (CUs) as the time model reads them: its entry's (or measurement's) count,
    else the one its shipped calibration was fitted with; None where neither is known."""
    return chip.multiprocessors or calibration().units(chip.id)


def nvidia_gpu(chip: Chip) -> bool:
    """Whether a chip is an NVIDIA GPU, whose ATen and cuDNN kernels the geometry models and
    the transposes describe."""
    return chip.cls == "gpu" and chip.vendor == "NVIDIA"


def multiprocessor_facts(chip: Chip) -> str:
    """A GPU's SMs and SM clock as the time model reads them, with where each comes from,
    in words ("" where neither is known)."""
    units = multiprocessors(chip)
    clock = sm_clock_hz(chip, units)
    facts = []
    if units:
        origin = "the chip entry's" if chip.multiprocessors else "the shipped calibration's"
        facts.append(f"{units} SMs ({origin})")
    if clock:
        origin = "the chip entry's" if chip.clock else "its FP32 peak / (SMs x FP32 lanes x 2)"
        facts.append(f"SM clock {clock / 1e9:.3g} GHz ({origin})")
    return ", ".join(facts)


def sm_clock_hz(chip: Chip, units: Optional[int]) -> Optional[float]:
    """A GPU's SM clock (Hz): the one its entry states (a measurement records it), else the
    one its datasheet's FP32 peak over ``units`` SMs implies where that peak is the CUDA
    cores' (a measured chip's FP32 peak is a GEMM's sustained rate, which would understate
    it); None where neither is known."""
    if chip.clock:
        return chip.clock
    if chip.units.get("fp32") != "vector":
        return None
    return launch_geometry.sm_clock_hz(chip.peaks.get("fp32"), units, chip.compute_capability)


def tile_units(chip: Chip, op_class: str) -> Optional[int]:
    """The multiprocessors a GPU runs ``op_class``'s tiles over (the chip's own count, else
    the one its shipped fit was made with), None where it has no tiles: a CPU, a GPU of
    unknown count, and a class outside op_classes.TILED_CLASSES (a matrix-vector product,
    which cuBLAS runs as one pass over the matrix, not cut in a GEMM's output tiles)."""
    return multiprocessors(chip) if op_class in op_classes.TILED_CLASSES else None