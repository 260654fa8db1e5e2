"""Fit fxroof's calibrated time model on NeuSight's public GPU kernel sweeps, validate it
leave-one-GPU-out, and write the parameters fxroof ships (fxroof/calibration.yaml).

    python benchmarks/calibrate_gpu_kernels.py [--data ../shared/data/gpu-kernels]
                                               [--out fxroof/calibration.yaml] [--report r.md]

The data (about 223,000 single-kernel FP32 latencies on 9 GPUs; MIT licence, notice in
fxroof/LICENSE-NeuSight.txt) is read where it lies and never copied into the project: only
the fitted parameters are written, each with what it was fitted on and its error band.

For each GPU and op class (gemm: torch.bmm and nn.Linear; conv: 3x3 nn.Conv2d; elementwise;
norm: nn.LayerNorm; softmax) it fits t0, the compute and memory fractions and the small-tile
rate of fxroof.calibration's model. Validation:
* own chip: fit on NeuSight's random-grid "train" rows, predict its transformer-shaped "test"
  rows, where a GPU has both;
* local scatter: each row's own-fit error over its nearest rows' (local_scatter_mape), the
  most a model smooth in the sizes could explain, fitted on this GPU;
* leave one GPU out: the family parameters (the median over the other NVIDIA GPUs; for a
  75 W board, over the other 75 W boards; for an AMD GPU, over the other AMD one) predict
  every row of the GPU left out -- what a chip with no measurements gets.
"""
from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import datetime
import os
import statistics
import sys

import numpy as np
import yaml
from scipy.spatial import cKDTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import script_main  # noqa: E402

from fxroof import calibration as cal, op_classes  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import atomic  # noqa: E402

DEFAULT_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "gpu-kernels")
FILES = {"gemm": "gemm.csv", "conv": "conv2d.csv", "elementwise": "elementwise.csv",
         "norm": "layernorm.csv", "softmax": "softmax.csv"}
COMPUTE_CAP = {"conv": 2.25}  # Winograd does up to 2.25x fewer multiplies than direct 3x3
# The conv sweep has no op short enough to see the launch floor (its fastest is ~60 us), so a
# convolution takes the GEMM fit's fixed cost on the same GPU instead of inventing its own.
FLOOR_FROM = {"conv": "gemm"}
# Nor has it a memory-bound convolution: its arithmetic intensity is 26-31 FLOP/byte at the
# 5th percentile, above every GPU's FP32 ridge but P4's and T4's (25-30), so a free memory
# fraction fitted something else -- the slowness of convolutions with few input channels --
# at 9.5% of the bandwidth on A100-80GB, and on the TF32 roof (8x the FP32 peak) priced
# ResNet-50's 1x1 convolutions as memory-bound at 190 GB/s, 7x their roof. The memory
# fraction is held at the GPU's streaming rate (its elementwise fit), and that slowness is
# fitted as what it is: a rate rising with the reduction length C_in x 9 (K_RISE).
MEMORY_FROM = {"conv": "elementwise"}
K_RISE = ("conv",)
# NeuSight timed each op from an idle GPU, host work included, and the host's work after the
# launch overlaps the kernel: a T4's elementwise ops of 32-64 MB take a median 8 us more
# than their bytes need at the streaming rate, of a 30 us floor for small ops. Fitted as
# t0 + kernel, the vector classes traded the fixed cost against the bandwidth and reached the
# memory cap (1.0 of the spec bandwidth on A100, V100, T4, P4), so inside a model, where the
# fixed cost is the host's and overlaps other kernels (fxroof.pipeline), their kernels ran at
# 1.15-1.39x the measured rate of large tensors. These classes fit the overlap
# (calibration.with_fixed_cost) and hold the memory fraction at the streaming rate below.
VECTOR_CLASSES = ("elementwise", "norm", "softmax")
# The streaming rate is read off the kernels moving calibration.STREAMING_L2_MULTIPLE x the
# L2 or more (NeuSight did not flush the cache between repetitions), at least this many.
STREAMING_MIN_ROWS = 20
# The boards of NeuSight's set held to a PCIe slot's 75 W (T4 70 W: gpus.csv; P4: "a
# low-power board", Jia et al., "Dissecting the NVidia Turing T4 GPU via Microbenchmarking",
# 2019, on both): the GPUs fxroof.calibration.LOW_POWER_FAMILY is fitted on.
LOW_POWER = ("T4", "P4")
# Boards of NeuSight's set that share a die (GA100: gpus.csv's A100 boards, 108 SMs each),
# and so check the rule fxroof ships for a chip without sweeps of its own whose die was
# swept (SAME_DIE, below; the SXM boards take their PCIe twins' fits the same way): each
# predicted with the other's fitted sets, beside the family's leave-one-GPU-out.
DIES = {"A100-PCIE-40GB": "GA100", "A100-PCIE-80GB": "GA100"}
# GeForce boards (fxroof.calibration.GEFORCE_FAMILY): none is in NeuSight's set, so their
# family is the all-GPU one with the two rates public microbenchmarks of GeForce boards
# measured apart from it. Each a measured rate over the datasheet's.
# * GEMMs on the tensor cores, over the dense rate with FP32 accumulation (PyTorch's): the
#   FP32-accumulate rate is the board's whole FP16 rate on Ada, half its FP16-accumulate one
#   on GA102 GeForce (chips.yaml). Datacenter boards by the same benchmarks: A100 0.74,
#   A6000 0.61, V100 0.76 (mli) -- below the datasheet, as the all-GPU family's 0.79 is.
GEFORCE_MATRIX_SHARE = {
    "RTX 3090 Ti, torch.matmul FP16, 81 of 80 TFLOP/s (mli/transformers-benchmarks README)":
        81 / 80,
    "RTX 3090 Ti, torch.matmul TF32, 42 of 40 TFLOP/s (the same table)": 42 / 40,
    "RTX 4090, torch.matmul FP16 n=2048, 167.1 of 165.2 TFLOP/s (mli/transformers-benchmarks "
    "issue #4)": 167.112 / 165.2,
    "RTX 4090, torch.matmul FP16 n=8192, 158.6 of 165.2 TFLOP/s (the same issue)":
        158.596 / 165.2,
    "RTX 4090, torch.mm BF16 at the fastest shape, 178.5 of 165.2 TFLOP/s (mag-/gpu_benchmark "
    "README, mamf-finder)": 178.5 / 165.2,
}
# * Streaming from memory, over the datasheet bandwidth (1008 GB/s).
GEFORCE_STREAMING = {
    "RTX 4090, clpeak global memory bandwidth float4, 909.8 GB/s (krrishnarraj/clpeak issue "
    "#106)": 909.81 / 1008,
    "RTX 4090, clpeak float16, 921.3 GB/s (the same issue)": 921.32 / 1008,
    "RTX 4090, CUDA.jl copyto! of 64 MB read and written, 895 GB/s (JuliaGPU/CUDA.jl issue "
    "#1860)": 895 / 1008,
}
# * A layer norm's kernels (a row a block, one pass over it), over the bandwidth: LN-class
#   kernels stream at most of it on a GeForce board, where the same kernels take about a
#   third of an H100's -- llm.c's layernorm_forward at 1191-1244 GB/s there, 0.36-0.37 of
#   3.35 TB/s, as PyTorch's own layer norm measured on fxroof's H100 (0.34 of it, vit_b_16
#   at batch 256) -- the SMs' row rate, not the memory, bounding them on a datacenter board.
GEFORCE_NORM_STREAMING = {
    "RTX 3090, llm.c layernorm_forward kernel 3 at its best block size, 689.1 GB/s "
    "(karpathy/llm.c pull request #600)": 689.11 / 936,
    "RTX 3090, llm.c layernorm_forward kernel 5 at its best block size, 773.1 GB/s (the "
    "same pull request)": 773.13 / 936,
}
# Datacenter boards NeuSight swept, whose tensor cores public microbenchmarks measured: their
# GEMMs' share of the dense matrix-engine peak, apart from the FP32 share NeuSight's sweeps
# fit (A100 0.93, V100 0.92; fxroof's H100 profile found its BF16 GEMMs at the H100 fit's
# 0.75, which it keeps). The same tables as GEFORCE_MATRIX_SHARE.
MATRIX_SHARE = {
    ("a100_sxm_40gb", "a100_sxm_80gb", "a100_pcie_40gb", "a100_pcie_80gb"): {
        "A100 80GB, torch.matmul FP16, 230 of 312 TFLOP/s (mli/transformers-benchmarks "
        "README)": 230 / 312,
        "A100 80GB, torch.matmul TF32, 116 of 156 TFLOP/s (the same table)": 116 / 156,
        "A100 SXM, torch.mm BF16 at the fastest shape, 267.9 of 312 TFLOP/s "
        "(mag-/gpu_benchmark README, mamf-finder)": 267.9 / 312,
    },
    ("v100_sxm2", "v100_pcie_32gb"): {
        "V100 16GB, torch.matmul FP16, 95 of 125 TFLOP/s (mli/transformers-benchmarks "
        "README)": 95 / 125,
    },
}
# The classes whose memory fraction is the streaming rate (the conv fit takes the
# elementwise one, MEMORY_FROM; copies and pooling fall back to elementwise): not norm and
# softmax, whose fitted fraction holds their kernels' per-row latency too.
GEFORCE_STREAMING_CLASSES = ("elementwise", "conv")


class Rows:
    """One (GPU, op class) sweep as arrays."""

    def __init__(self, rows: list[dict], op_class: str):
        def column(name):
            return np.array([float(r[name]) for r in rows])

        self.flops, self.bytes, self.seconds = column("flops"), column("bytes"), \
            column("latency_s")
        self.split = np.array([r["split"] for r in rows])
        self.shape = _shape(rows, op_class)
        self.dims = None
        if op_class == "gemm":
            self.dims = (column("batch"), column("m"), column("n"), column("k"))
        elif op_class == "conv":
            m = column("batch") * column("out_size") ** 2
            self.dims = (np.ones_like(m), m, column("c_out"), column("c_in") * 9)

    def subset(self, mask) -> "Rows":
        part = object.__new__(Rows)
        part.flops, part.bytes, part.seconds = self.flops[mask], self.bytes[mask], \
            self.seconds[mask]
        part.split = self.split[mask]
        part.shape = self.shape[mask]
        part.dims = tuple(d[mask] for d in self.dims) if self.dims is not None else None
        return part

    def __len__(self) -> int:
        return len(self.seconds)


# The columns that place a kernel among its sweep's others, for local_scatter_mape: log2 of
# each, and the op timed (an op apart from every other: no neighbour across ops)
SHAPE_COLUMNS = {"gemm": ("batch", "m", "n", "k"), "conv": ("batch", "c_in", "c_out", "in_size"),
                 "elementwise": ("rows", "cols"), "norm": ("rows", "cols"),
                 "softmax": ("rows", "cols")}
OP_APART = 1000.0
NEIGHBOURS = 8


def _shape(rows: list[dict], op_class: str) -> np.ndarray:
    ops = sorted({r["op"] for r in rows})
    return np.array([[np.log2(float(r[c])) for c in SHAPE_COLUMNS[op_class]]
                     + [OP_APART * ops.index(r["op"])] for r in rows])


# Each swept board's own chips.yaml entry (its peaks and bandwidth the ones gpus.csv lists),
# where gpus.csv names none or names the nearest SXM part of the same die (which takes the
# board's fits too)
OWN_BOARD = {"P100-PCIE-16GB": "p100_pcie_16gb", "P4": "p4", "MI100": "mi100",
             "MI210": "mi210", "A100-PCIE-40GB": "a100_pcie_40gb",
             "A100-PCIE-80GB": "a100_pcie_80gb", "V100-PCIE-32GB": "v100_pcie_32gb"}


class Gpu:
    def __init__(self, spec: dict):
        self.name = spec["gpu"]
        # the chips its fits feed: its own board's entry, and the SXM part gpus.csv names
        self.chips = [c for c in (OWN_BOARD.get(self.name), spec["fxroof_chip"]) if c]
        self.units = int(spec["sm_count"])
        self.l2_bytes = float(spec["l2_mb"]) * 1e6
        self.nvidia = not self.name.startswith("MI")
        self.bandwidth = float(spec["mem_bw_gbps"]) * 1e9
        vector = float(spec["fp32_gflops"]) * 1e9
        # rocBLAS runs FP32 GEMMs on the matrix cores (MFMA): their roof is the matrix peak
        matrix = float(spec["fp32_matrix_gflops"] or spec["fp32_gflops"]) * 1e9
        self.peaks = {"gemm": matrix, "conv": matrix}
        self.vector_peak = vector

    def peak(self, op_class: str) -> float:
        return self.peaks.get(op_class, self.vector_peak)


def load(data: str) -> tuple[dict, dict]:
    """({gpu: Gpu}, {(gpu, op class): Rows}) of the gpu-kernels folder ``data``; a folder
    that is not one is named in a FxroofError."""
    missing = [name for name in ("gpus.csv", *FILES.values())
               if not os.path.isfile(os.path.join(data, name))]
    if missing:
        raise FxroofError(f"'{data}' is not NeuSight's gpu-kernels folder: it has no "
                          f"{', '.join(missing)}. Pass --data the folder that holds them "
                          f"(../shared/data/gpu-kernels beside the project).")
    try:
        gpus = {r["gpu"]: Gpu(r) for r in _rows(data, "gpus.csv")}
        sweeps = {}
        for op_class, name in FILES.items():
            by_gpu: dict = {}
            for row in _rows(data, name):
                by_gpu.setdefault(row["gpu"], []).append(row)
            for gpu, rows in by_gpu.items():
                sweeps[gpu, op_class] = Rows(rows, op_class)
    except (KeyError, ValueError, TypeError) as e:  # a column missing, a number that is not
        raise FxroofError(f"'{data}' does not read as NeuSight's sweeps ({type(e).__name__}: "
                          f"{e}): its CSV files need the columns its README lists. Pass --data "
                          f"the unmodified gpu-kernels folder.") from None
    return gpus, sweeps


def _rows(data: str, name: str) -> list[dict]:
    with open(os.path.join(data, name), newline="") as f:
        return list(csv.DictReader(f))


def streaming_fraction(rows: Rows, gpu: Gpu) -> float | None:
    """The fraction of the spec bandwidth a GPU's kernels of one sweep stream at
    (calibration.streaming_fraction), None where too few rows are large enough to say."""
    return cal.streaming_fraction(rows.bytes, rows.seconds, gpu.bandwidth, gpu.l2_bytes,
                                  STREAMING_MIN_ROWS)


def fit(rows: Rows, gpu: Gpu, op_class: str, fitted: dict) -> cal.Params:
    """One (GPU, class) sweep, taking its fixed cost and memory fraction from the classes
    FLOOR_FROM and MEMORY_FROM name, already in ``fitted`` ({(gpu, class): Params}), or for
    one of the VECTOR_CLASSES from its own large kernels."""
    floor = fitted.get((gpu.name, FLOOR_FROM.get(op_class)))
    streaming = fitted.get((gpu.name, MEMORY_FROM.get(op_class)))
    vector = op_class in VECTOR_CLASSES
    memory = streaming_fraction(rows, gpu) if vector else \
        streaming.memory if streaming else None
    return cal.fit(rows.flops, rows.bytes, rows.seconds, gpu.peak(op_class), gpu.bandwidth,
                   rows.dims, gpu.units, COMPUTE_CAP.get(op_class, 1.0),
                   floor.t0 if floor else None, tiles=cal.tiling(op_class),
                   memory=memory, k_rise=op_class in K_RISE, overlap=vector)


def fit_all(gpus: dict, sweeps: dict, subset=None) -> dict:
    """{(gpu, class): Params}; classes that borrow from others are fitted after them."""
    fitted: dict = {}
    borrows = set(FLOOR_FROM) | set(MEMORY_FROM)
    for (gpu, op_class), rows in sorted(sweeps.items(), key=lambda kv: kv[0][1] in borrows):
        rows = rows.subset(subset(rows)) if subset else rows
        fitted[gpu, op_class] = fit(rows, gpus[gpu], op_class, fitted)
    return fitted


def ratios(params: cal.Params, rows: Rows, gpu: Gpu, op_class: str) -> np.ndarray:
    """measured / predicted for each row."""
    used = cal.utilization(*rows.dims, gpu.units, params.small_tile, params.k_half,
                           tiles=cal.tiling(op_class)) \
        if rows.dims is not None else 1.0
    predicted = cal.predict(rows.flops, rows.bytes, gpu.peak(op_class), gpu.bandwidth, params,
                            used)
    return rows.seconds / predicted


def mape(r: np.ndarray) -> float:
    """Mean |predicted / measured - 1|, in percent."""
    return float(np.mean(np.abs(1 / r - 1)) * 100)


def local_scatter_mape(shape: np.ndarray, r: np.ndarray, neighbours: int = NEIGHBOURS) -> float:
    """The MAPE left once each kernel's measured / predicted ``r`` is divided by the median
    of its ``neighbours`` nearest other kernels' (in ``shape``, log2 of the sizes): about
    what a model smooth in the shape could reach on these kernels, fitted on this very GPU
    (an estimate, not a bound: the neighbours lie some way off). Where it stays high,
    kernels of nearly one shape take different times (cuDNN or cuBLAS switching algorithm
    or tile between them), and no size-dependent form can follow it."""
    neighbours = min(neighbours, len(r) - 1)  # a sweep of few kernels: all the others
    _, index = cKDTree(shape).query(shape, k=neighbours + 1)
    others = index[:, 1:]  # the nearest is the kernel itself (or its exact twin)
    return mape(r / np.exp(np.median(np.log(r)[others], axis=1)))


def family(fitted: list[cal.Params]) -> cal.Params:
    """The median of each parameter over chips: what a chip without measurements gets."""
    return cal.Params(*(statistics.median(getattr(p, f) for p in fitted)
                        for f in ("t0", "compute", "memory", "small_tile")),
                      k_half=statistics.median(p.k_half for p in fitted),
                      serial=statistics.median(p.serial for p in fitted))


def with_host(gpu_params: cal.Params, host_params: cal.Params) -> cal.Params:
    """``gpu_params`` with the fixed cost of ``host_params``: t0 and its serial share are
    the host's (NeuSight's hosts' floors run 15-61 us), so a GPU's leave-one-out error with
    its own host's fixed cost known is the error of what carries from GPU to GPU."""
    return dataclasses.replace(gpu_params, t0=host_params.t0, serial=host_params.serial)


def band(r: np.ndarray) -> tuple:
    return (round(float(np.percentile(r, 10)), 3), round(float(np.percentile(r, 90)), 3))


def calibrate(gpus: dict, sweeps: dict) -> tuple[dict, list]:
    own = fit_all(gpus, sweeps)
    report = []
    for (gpu, op_class), rows in sorted(sweeps.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        g = gpus[gpu]
        others = [p for (o, c), p in own.items() if c == op_class and o != gpu
                  and gpus[o].nvidia == g.nvidia and (gpu not in LOW_POWER or o in LOW_POWER)]
        ideal = np.maximum(rows.flops / g.peak(op_class), rows.bytes / g.bandwidth)
        own_ratios = ratios(own[gpu, op_class], rows, g, op_class)
        line = {"gpu": gpu, "class": op_class, "rows": len(rows),
                "ideal_mape": mape(rows.seconds / ideal), "own_mape": mape(own_ratios),
                "local_scatter_mape": local_scatter_mape(rows.shape, own_ratios),
                "logo_mape": mape(ratios(family(others), rows, g, op_class)) if others
                else None,
                "logo_ratios": ratios(family(others), rows, g, op_class) if others else None,
                "logo_host_mape": mape(ratios(with_host(family(others), own[gpu, op_class]),
                                              rows, g, op_class)) if others else None}
        sibling = [p for (o, c), p in own.items() if c == op_class and o != gpu
                   and DIES.get(o) is not None and DIES.get(o) == DIES.get(gpu)]
        if sibling:
            line["same_die_mape"] = mape(ratios(sibling[0], rows, g, op_class))
        if not g.nvidia:  # what an AMD GPU without measurements took before its family
            nvidia = [p for (o, c), p in own.items() if c == op_class and gpus[o].nvidia]
            line["nvidia_family_mape"] = mape(ratios(family(nvidia), rows, g, op_class))
        train, test = rows.split == "train", rows.split == "test"
        if train.sum() > 50 and test.sum() > 20:
            held = fit(rows.subset(train), g, op_class, own)
            line["train_to_test_mape"] = mape(ratios(held, rows.subset(test), g, op_class))
        report.append(line)
    return own, report


# Chips with no sweep of their own that are a swept chip's die take its fitted sets: the
# H200 is the H100 SXM's GH100 -- 132 SMs, 50 MB L2, 1980 MHz, the same peaks in chips.yaml
# ("identical compute", its sources) -- with HBM3e, and a memory rate is a fraction of each
# chip's own bandwidth. Checked on whole models measured on an H200 (benchmarks/README.md):
# fp32 inference's median error 26% -> 23% against the family median it took before. The
# H100 PCIe is the same die with 114 SMs enabled, a 1755 MHz boost and HBM2e: its fractions
# are of its own peaks and bandwidth, its tiles run over its own SMs (chips.yaml gives them).
SAME_DIE = {"h200_sxm": "h100_sxm", "h100_pcie": "h100_sxm"}


def parameters(gpus: dict, sweeps: dict, own: dict, report: list) -> dict:
    """The calibration file's content: per fxroof chip its fitted sets, per family the
    medians, each with its band and source."""
    today = datetime.date.today().isoformat()
    source = (f"NeuSight kernel sweeps (ASPLOS 2025, MIT licence), FP32, fitted by "
              f"benchmarks/calibrate_gpu_kernels.py on {today}")
    chips: dict = {}
    for (gpu, op_class), params in own.items():
        g = gpus[gpu]
        r = ratios(params, sweeps[gpu, op_class], g, op_class)
        for chip in g.chips:
            entry = chips.setdefault(chip, {"units": g.units, "fitted_on": gpu, "classes": {}})
            entry["classes"][op_class] = _entry(params, band(r), f"{source}: {gpu}, "
                                                f"{len(r)} kernels, MAPE {mape(r):.1f}%")
    for chip_ids, measured in MATRIX_SHARE.items():
        share = round(statistics.median(measured.values()), 4)
        for chip in chip_ids:
            if chip in chips:
                gemm = chips[chip]["classes"]["gemm"]
                gemm["matrix_compute"] = share
                gemm["source"] += (f"; on the tensor cores {share} of the dense peak, the "
                                   f"median of -- {'; '.join(measured)}")
    for chip, die in SAME_DIE.items():
        if die in chips:
            chips[chip] = {**copy.deepcopy(chips[die]), "same_die_as": die}
    families: dict = {"gpu": {}, cal.LOW_POWER_FAMILY: {}, cal.AMD_FAMILY: {}}
    for op_class in FILES:
        # (family, GPUs its median is over, GPUs whose leave-one-out errors make its band:
        # those that would take it, had they no measurements)
        for name, members, users, what in (
                ("gpu", lambda g: gpus[g].nvidia,
                 lambda g: gpus[g].nvidia and g not in LOW_POWER, "NVIDIA GPUs"),
                (cal.LOW_POWER_FAMILY, lambda g: g in LOW_POWER, lambda g: g in LOW_POWER,
                 f"NVIDIA GPUs of {cal.LOW_POWER_W:g} W or less ({', '.join(LOW_POWER)})"),
                (cal.AMD_FAMILY, lambda g: not gpus[g].nvidia, lambda g: not gpus[g].nvidia,
                 "AMD GPUs")):
            fitted = [p for (gpu, c), p in own.items() if c == op_class and members(gpu)]
            if not fitted:  # no AMD convolution sweep: such a GPU takes the all-GPU set
                continue
            pooled = np.concatenate([line["logo_ratios"] for line in report
                                     if line["class"] == op_class and users(line["gpu"])
                                     and line["logo_ratios"] is not None])
            families[name][op_class] = _entry(
                family(fitted), band(pooled), f"{source}: median over {len(fitted)} {what}; "
                f"band from leave-one-GPU-out, MAPE {mape(pooled):.1f}%")
    families[cal.GEFORCE_FAMILY] = geforce_family(families["gpu"])
    return {"schema_version": 1,
            "model": "kernel = max(F / (peak x compute x tile utilization x k / (k + "
                     "k_half)), B / (bandwidth x memory)); time = t0 x serial + max(t0 x "
                     "(1 - serial), kernel) (serial 1 where absent); see "
                     "fxroof/calibration.py",
            "licence": "derived from NeuSight data, MIT licence: fxroof/LICENSE-NeuSight.txt",
            "chips": chips, "families": families}


def geforce_family(gpu_family: dict) -> dict:
    """The GeForce family's entries: the all-GPU family's, with the median of
    GEFORCE_MATRIX_SHARE as the GEMMs' matrix-engine share and of GEFORCE_STREAMING as the
    streaming classes' memory fraction, and where each came from."""
    matrix = round(statistics.median(GEFORCE_MATRIX_SHARE.values()), 4)
    streaming = round(statistics.median(GEFORCE_STREAMING.values()), 4)
    family_ = copy.deepcopy(gpu_family)
    family_["gemm"]["matrix_compute"] = matrix
    # no ": " in what is added: the source's last one separates where a set comes from
    # from what it was fitted on (fxroof.chip_params.time_model_source)
    family_["gemm"]["source"] += (
        f"; on the tensor cores {matrix} of the dense FP32-accumulate peak, the median of "
        f"GeForce measurements -- {'; '.join(GEFORCE_MATRIX_SHARE)}")
    for op_class in GEFORCE_STREAMING_CLASSES:
        family_[op_class]["memory"] = streaming
        family_[op_class]["source"] += (
            f"; memory at {streaming} of the bandwidth, the median of GeForce measurements -- "
            f"{'; '.join(GEFORCE_STREAMING)}")
    # a training norm's classes fall back to the norm class: they keep the all-GPU rate,
    # since nothing measured a batch norm's reductions on a GeForce board
    for training in op_classes.TRAINING_NORM_CLASSES:
        family_[training] = {**copy.deepcopy(gpu_family["norm"]), "source": (
            gpu_family["norm"]["source"] + "; a training norm's reductions, the all-GPU "
            "family's norm rate (no GeForce measurement of them)")}
    norm = round(statistics.median(GEFORCE_NORM_STREAMING.values()), 4)
    family_["norm"]["memory"] = norm
    family_["norm"]["source"] += (
        f"; memory at {norm} of the bandwidth, the median of GeForce layer-norm kernel "
        f"measurements -- {'; '.join(GEFORCE_NORM_STREAMING)}")
    return family_


def _entry(params: cal.Params, band_: tuple, source: str) -> dict:
    entry = {"t0": float(f"{params.t0:.4g}"), "compute": round(params.compute, 4),
             "memory": round(params.memory, 4), "small_tile": round(params.small_tile, 4)}
    if params.k_half:
        entry["k_half"] = float(f"{params.k_half:.4g}")
    if params.serial < 1.0:
        entry["serial"] = round(params.serial, 4)
    return {**entry, "band": list(band_), "source": source}


def markdown(report: list) -> str:
    lines = ["| op class | GPU | kernels | ideal roof MAPE | own fit MAPE | "
             "own fit, local scatter removed | "
             "train -> test MAPE | leave-one-GPU-out MAPE | ... with its host's t0 | "
             "with its die's other board's fit |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report:
        def pct(v):
            return "-" if v is None else f"{v:.1f}%"
        lines.append(f"| {r['class']} | {r['gpu']} | {r['rows']:,} | {pct(r['ideal_mape'])} | "
                     f"{pct(r['own_mape'])} | {pct(r['local_scatter_mape'])} | "
                     f"{pct(r.get('train_to_test_mape'))} | {pct(r['logo_mape'])} | "
                     f"{pct(r['logo_host_mape'])} | {pct(r.get('same_die_mape'))} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=DEFAULT_DATA, help="the gpu-kernels folder")
    parser.add_argument("--out", default=cal.CALIBRATION_FILE, help="calibration YAML to write")
    parser.add_argument("--report", help="also write the validation table (markdown) here")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.data):
        print(f"calibrate: no data folder '{args.data}' (pass --data)", file=sys.stderr)
        return 1
    gpus, sweeps = load(args.data)
    own, report = calibrate(gpus, sweeps)
    with atomic(args.out) as f:
        f.write("# fxroof's calibrated time model: parameters per chip and op class.\n"
                "# Written by benchmarks/calibrate_gpu_kernels.py; do not edit by hand.\n")
        yaml.safe_dump(parameters(gpus, sweeps, own, report), f, sort_keys=False)
    table = markdown(report)
    print(table)
    print("\nAMD GPUs priced with the NVIDIA family instead of the other AMD GPU's (MAPE):")
    print("\n".join(f"  {r['gpu']} {r['class']}: {r['nvidia_family_mape']:.1f}% (leave-one-GPU-"
                    f"out: {r['logo_mape']:.1f}%)" for r in report if "nvidia_family_mape" in r))
    if args.report:
        with atomic(args.report) as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
