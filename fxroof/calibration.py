"""The calibrated time model: what a node takes on a chip, not only what its roof allows.

The ideal roofline says max(F / P, B / W) for F FLOPs and B bytes on a chip of peak P FLOP/s
and bandwidth W bytes/s. Real kernels fall short of it in the ways this model names:

* a fixed cost per op, ``t0`` (seconds): the launch and, in eager PyTorch, the host-side
  dispatch that the device waits for when kernels are short; on a GPU it also holds the
  ramp-up of a kernel to its steady rate (half-empty waves at the start and end);
* a sustained fraction of the peak for compute, ``compute`` (0..1], and of the bandwidth for
  memory traffic, ``memory`` (0..1], per op class: GEMMs reach a large fraction of the FMA
  peak, norms and softmax a fraction of the bandwidth;
* tile utilization for GEMMs and convolutions on GPUs (``utilization``): the output is cut
  in tiles run in waves over the S multiprocessors (ceil(T / S) waves for T tiles, so the
  last one may run part-empty) -- square 128-, 64- or 32-wide ones for a GEMM, which splits a
  long reduction (split-K) when there are fewer tiles than multiprocessors, and 128 output
  positions by 128, 64 or 32 channels for a convolution -- and smaller tiles run at
  ``small_tile`` of the rate;
* on a CPU, a GEMM's operands packed into the BLAS's panels on every call, a share
  ``pack_half`` x (1 / m + 1 / n) of its compute for an m x n output (``utilization``);
* on a CPU, a cache: an op's first ``cache_bytes`` move at ``cache_memory`` x the bandwidth,
  but for those of a training step's saved activations (``saved_bytes``), which stream
  to and from memory whatever their size; and the first touch of an output large enough
  to be freshly mapped (``fresh_bytes``: the kernel faults in and zeroes every page, call
  after call) at ``fresh_rate`` bytes/s;
* on a CPU, an elementwise op writing over the operand it reads (``op_classes.in_place``:
  relu_, hardtanh_, add_) moves its bytes ``in_place_memory`` times faster than one writing a
  new tensor: it fetches no line before writing it (write-allocate), and in a model what it
  reads is what the op before it just wrote;
* on a CPU, a kernel Inductor generates but cannot vectorise (``unvectorised``: a stride-2
  pool over an NCHW map) computes one lane at a time: its peak is the vector peak over the
  ``vector_lanes`` of the device's vector code (16 fp32 lanes with AVX-512);
* on a CPU, a channels-last grouped convolution of c output channels a group computes them
  a vector at a time, so its peak is the vector peak over ceil(c / lanes) x lanes / c
  (``op_classes.lane_padding``: 2 for RegNet's 8-channel groups with AVX-512);
* on a CPU, the layout passes of a convolution (``layout_bytes``): oneDNN computes in a
  blocked layout, so it reorders an NCHW convolution's input and weights into it and the
  output back, and a channels-last one's weights, each pass reading and writing its
  tensor, at ``layout_rate`` bytes/s, none of it overlapped with the convolution -- and
  the blocked copies are new buffers, freshly mapped when large; a result whose channels
  fill no whole block of the layout (``layout_block`` channels) goes back through oneDNN's
  generic reorder, at ``uneven_layout_rate``.

* on a GPU, the fixed cost overlaps the kernel: only a share ``serial`` of t0 is spent
  before the kernel starts, and the host's work after the launch runs beside it, so a long
  kernel hides the rest (with_fixed_cost); the memory fraction of the vector classes is the
  streaming rate of kernels far larger than the L2 cache, what a large batch's activations
  get.

    kernel = max(F / (P x compute x utilization), memory time)
    time = t0 x serial + max(t0 x (1 - serial), kernel) + fresh bytes / fresh_rate
           + layout bytes / layout_rate                        (serial = 1 on a CPU)

Parameters per (chip, op class) are fitted on measurements (``fit``) and shipped in
``calibration.yaml`` beside this module, each set with what it was fitted on and its error;
``band`` holds the p10 and p90 of measured / predicted where the set was validated (its own
kernels for a fitted chip, the GPUs left out for a family), so every prediction carries a
range. GPUs without their own measurements take the family parameters (the median over the
measured NVIDIA GPUs, or over the 75 W boards for a GPU of that power; a GeForce board's
with the rates public microbenchmarks of GeForce boards measured) with the wider band of a
chip never seen; a device measured with
``fxroof chips measure`` carries its own set in its chip entry (fxroof.probes).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np
import yaml

from fxroof.errors import FxroofError
from fxroof.hidden_bytes import (fresh_bytes, layout_bytes, pointwise_weights, saved_bytes,
                                 unblocked_result_bytes)
from fxroof.op_classes import (CONV_CLASSES, FALLBACK, MATRIX_CLASSES, gemm_dims, in_place,
                               op_class_of, reduction_length)

CALIBRATION_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.yaml")
# GPU boards held to the 75 W a PCIe slot supplies (T4 70 W, P4 75 W, L4 72 W) cap their
# clocks under sustained load: NeuSight's T4 and P4 GEMM fits reach 0.41-0.45 of the FP32
# peak against 0.75-1.0 on its five other NVIDIA GPUs, and NVIDIA's forum puts a T4's
# cuBLAS FP16 GEMM at 24 of 65 TFLOP/s by "power capping". A GPU of that power without its
# own measurements takes the family fitted on those boards, not the all-GPU median.
LOW_POWER_W = 75.0
LOW_POWER_FAMILY = "gpu_low_power"
# GeForce boards run above the boost clock their datasheet's peaks are computed at while
# power and heat allow, and none of NeuSight's GPUs is one: their GEMMs on the tensor cores
# sustain the datasheet's dense rate or more (an RTX 4090 1.01 of its FP16 rate, an RTX 3090
# Ti 1.01; datacenter boards 0.6-0.86), their GDDR6X memory streams at 0.90 of its
# bandwidth, and a layer norm's row-per-block kernels, which the SMs' row rate holds to a
# third of an H100's bandwidth, reach 0.78 of theirs: many SMs at high clocks for the
# memory. A GeForce GPU without its own measurements takes the family built from those
# (benchmarks/calibrate_gpu_kernels.py, GEFORCE_*), the all-GPU median for the rest.
GEFORCE_FAMILY = "gpu_geforce"
GEFORCE_MARK = "GeForce"  # in the chip's name: NVIDIA's consumer line
# AMD's GPUs run other kernels (rocBLAS and MIOpen, FP32 GEMMs on the matrix cores) from
# other hosts' dispatch, and the NVIDIA median prices them badly: leave-one-GPU-out on
# NeuSight's MI100 and MI210 sweeps, the NVIDIA family's MAPE is 27-51% per class where the
# other AMD GPU's parameters give 12-27% (benchmarks/README.md). An AMD GPU without its own
# measurements takes the median of the AMD GPUs' fits; a class they have no sweep of
# (convolutions) the all-GPU one.
AMD_FAMILY = "gpu_amd"
AMD_VENDOR = "AMD"

# A GPU kernel moving this many times the L2 cache streams from DRAM: neither the cache nor
# the fixed cost moves its rate (streaming_fraction).
STREAMING_L2_MULTIPLE = 8

# The smallest fraction of a peak or of the bandwidth a fit may give a class (fit).
MIN_FRACTION = 0.01
# Where a GPU fit starts the rate of a smaller tile (relative to the largest), one fit each.
TILE_RATE_STARTS = (0.8, 0.5, 0.25)


@dataclass(frozen=True)
class Params:
    """One op class on one chip: seconds, fractions of peak and bandwidth, and the band."""

    t0: float                     # s: fixed cost per op (launch, dispatch, ramp)
    compute: float                # sustained fraction of the peak FLOP/s
    memory: float                 # sustained fraction of the bandwidth
    small_tile: float = 1.0       # GEMM/conv: rate of a 64-wide tile relative to a 128 one
    band: tuple = (1.0, 1.0)      # p10, p90 of measured / predicted where it was validated
    source: str = ""              # what it was fitted on
    cache_bytes: float = 0.0      # bytes an op moves at cache speed before memory speed
    cache_memory: float = 1.0     # the cache's rate, as a multiple of the memory bandwidth
    fresh_rate: float = 0.0       # bytes/s of first touch of freshly mapped memory (0: none)
    k_half: float = 0.0           # CPU GEMM/conv: reduction length at half the compute rate
    layout_rate: float = 0.0      # bytes/s of a CPU convolution's layout reorders (0: none)
    pointwise_layout_rate: float = 0.0  # ... of a 1x1 one's weights (pointwise_weights; 0: as
                                        # layout_rate)
    uneven_layout_rate: float = 0.0  # ... of a result whose channels fill no whole block
                                     # (unblocked_result_bytes; 0: as layout_rate)
    layout_block: float = 0.0     # channels per block of those reorders' layout (0: unknown)
    vector_lanes: float = 0.0     # fp32 lanes of a CPU's generated vector code (0: unknown)
    serial: float = 1.0           # share of t0 spent before the kernel starts; the rest
                                  # overlaps it (a GPU's host work after the launch)
    matrix_compute: float = 0.0   # GEMM: sustained fraction of the matrix engine's peak
                                  # (TF32, BF16, FP16), where measured apart from the FP32
                                  # fit of ``compute``; 0: ``compute`` serves both
    pack_half: float = 0.0        # CPU GEMM: rows (or columns) of output at which packing
                                  # the other operand, once per call, halves the rate (0:
                                  # none; utilization)
    in_place_memory: float = 1.0  # CPU: an in-place op's memory rate over its class's
                                  # (op_classes.in_place: no fetch of the lines it writes)


class Row(NamedTuple):
    """One measured op, as the fits take it."""

    flops: float
    bytes: float
    fresh: float             # bytes written to freshly mapped memory (fresh_bytes)
    seconds: float
    k: float                 # reduction length of a GEMM or convolution, else inf
    layout: float = 0.0      # bytes its layout reorders move (layout_bytes)
    layout_fresh: float = 0.0  # of which written to freshly mapped buffers
    pointwise: float = 0.0   # 1 where those are a 1x1 convolution's weights (pointwise_weights)
    dims: Optional[tuple] = None  # (batch, m, n, k) of a GEMM-like op (gemm_dims), for a
                                  # GPU's tiles; None: not one, or not known
    saved: float = 0.0       # bytes of saved activations it moves (saved_bytes)
    uneven: float = 0.0      # of ``layout``, the bytes of results reordered back from a
                             # layout their channels fill no whole block of
                             # (unblocked_result_bytes)
    in_place: float = 0.0    # 1 where it writes over an operand it reads (op_classes.in_place)


def row_of(record: dict, seconds: float, block: int = 0) -> Row:
    """A node record timed at ``seconds``, as the fits take it, on a device whose
    convolutions compute in blocks of ``block`` channels (device.layout_block; 0: unknown)."""
    return Row(record["flops"], record["bytes"], fresh_bytes(record), seconds,
               reduction_length(record), *layout_bytes(record),
               float(pointwise_weights(record)), matrix_dims(record), saved_bytes(record),
               unblocked_result_bytes(record, block), float(in_place(record)))


def matrix_dims(record: dict) -> Optional[tuple]:
    """(batch, m, n, k) of a GEMM-like node (op_classes.gemm_dims), else None."""
    return gemm_dims(record) if op_class_of(record) in MATRIX_CLASSES else None


def layout_rate_of(params: Params, record: dict) -> float:
    """Bytes/s at which ``record``'s layout reorders (layout_bytes) run on a device with
    ``params`` (layout_rates)."""
    return float(layout_rates(params.layout_rate, params.pointwise_layout_rate,
                              params.uneven_layout_rate, float(pointwise_weights(record)),
                              layout_bytes(record)[0],
                              unblocked_result_bytes(record, int(params.layout_block))))


def layout_rates(rate: float, pointwise_rate: float, uneven_rate: float, pointwise, moved,
                 uneven):
    """Bytes/s of each op's layout reorders (arrays or scalars, one per op) moving ``moved``
    bytes: a 1x1 convolution's weight transpose (``pointwise`` > 0) at ``pointwise_rate``
    where the device measured one; else ``uneven`` of the bytes, results of uneven channels
    reordered back, at ``uneven_rate`` where measured and the rest at ``rate`` -- moved over
    the seconds of both. 0 where ``rate`` is (a device without reorders)."""
    pointwise, moved, uneven = (np.asarray(a, dtype=float) for a in (pointwise, moved, uneven))
    blended = np.full(moved.shape, float(rate))
    if rate and uneven_rate:
        with np.errstate(divide="ignore", invalid="ignore"):
            seconds = (moved - uneven) / rate + uneven / uneven_rate
            blended = np.where(uneven > 0, moved / seconds, rate)
    if rate and pointwise_rate:
        return np.where(pointwise > 0, pointwise_rate, blended)
    return blended


class Tiling(NamedTuple):
    """How a GPU library cuts a GEMM-like op's output (rows: m, columns: n) into tiles."""

    shapes: tuple    # (rows, columns) per tile, largest first; each next at small_tile x rate
    split_k: bool    # a long reduction is split when there are fewer tiles than units


# cuBLAS's GEMMs use square tiles and split a long reduction over idle multiprocessors
# (split-K). cuDNN's forward convolution kernels keep 128 output positions per tile and pick
# its width over the output channels (scudnn_128x32, _128x64, _128x128 in NeuSight's kernel
# names), and do not split the reduction: a 5x5 map with 1,074 input channels runs 15 CTAs on
# 80 SMs. Fitted that way the convolution sweep's MAPE falls by 3-6 points per GPU.
GEMM_TILING = Tiling(((128, 128), (64, 64), (32, 32)), split_k=True)
CONV_TILING = Tiling(((128, 128), (128, 64), (128, 32)), split_k=False)


def tiling(op_class: Optional[str]) -> Tiling:
    return CONV_TILING if op_class in CONV_CLASSES else GEMM_TILING


def _tile_utilization(batch, m, n, k, units: int, rows: int, cols: int, split_k: bool):
    """Useful over issued work when (batch x m x n) is cut in rows x cols output tiles run in
    waves of ``units`` multiprocessors, splitting k (split-K, in slices of at least 256) when
    allowed and there are fewer tiles than multiprocessors."""
    tiles = batch * np.ceil(m / rows) * np.ceil(n / cols)
    split = np.maximum(1.0, np.minimum(np.floor(units / tiles), np.floor(k / 256))) \
        if split_k else 1.0
    waves = np.ceil(tiles * split / units)
    return batch * m * n / (waves * units * rows * cols / split)


def utilization(batch, m, n, k, units: Optional[int], small_tile: float = 1.0,
                k_half: float = 0.0, tiles: Tiling = GEMM_TILING, pack_half: float = 0.0):
    """The best of the tiling's tile shapes (a library picks smaller tiles for small
    problems, at ``small_tile`` of the rate per step down), times k / (k + k_half) where
    ``k_half`` is set: a short reduction cannot amortise what a kernel does once per output
    -- on a CPU, a depthwise convolution's 9 products per output against a dense one's
    hundreds cannot keep the vector units' accumulators busy between loads and stores of the
    output; on a GPU, a tile's prologue and epilogue (loading its first slices, writing its
    outputs) against a main loop of k / slice steps -- and the rate rises with k to its
    asymptote. Where ``units`` is unknown (a CPU) only that rise is applied, and, where
    ``pack_half`` is set, the packing of the operands: a CPU BLAS copies both into its
    panel layout on every call, m x k and k x n elements against m x k x n multiply-adds, so
    that copy costs the product a share pack_half x (1 / m + 1 / n) of its compute -- a
    product of 49 rows (ConvNeXt's last stage at batch 1) reached 52 GFLOP/s where 784 rows
    of the same weights reached 103 on a 2-core EPYC, weights cache-resident both times."""
    k_known = np.where(np.isinf(k), 1e30, np.asarray(k, dtype=float))  # unknown: no penalty
    rise = k_known / (k_known + k_half) if k_half else np.ones_like(k_known)
    if not units:
        if not pack_half:
            return rise
        rows, cols = (np.maximum(np.asarray(a, dtype=float), 1.0) for a in (m, n))
        return rise / (1.0 + pack_half * (1.0 / rows + 1.0 / cols))
    b, m, n, k = (np.asarray(a, dtype=float) for a in (batch, m, n, k))
    return rise * np.maximum.reduce([
        _tile_utilization(b, m, n, k, units, rows, cols, tiles.split_k) * small_tile ** i
        for i, (rows, cols) in enumerate(tiles.shapes)])


def kernel_seconds(flops, nbytes, peak, bandwidth, params: Params, utilized=1.0, saved=0.0,
                   in_place=0.0):
    """Seconds the device computes or moves data (arrays or scalars): max(F / (P c u),
    memory time), the memory time being B / (W m) -- or, with a cache, its first
    ``cache_bytes`` at the cache's rate and the rest at W m (on a CPU an op whose operands
    fit in the last-level cache runs several times faster than one that streams from
    DRAM). ``saved`` of the bytes never come from the cache: a training step's saved
    activations, written to memory last touched a step ago and read back after the rest of
    the step has passed through the cache (fxroof.memory.annotate_saved_traffic). Where
    ``in_place`` is 1 (op_classes.in_place: an op writing over the operand it reads), the
    memory time is ``in_place_memory`` times shorter: it fetches no line to write (a CPU's
    write-allocate), and in a model its operand is what the op before it just wrote."""
    compute = np.asarray(flops, dtype=float) / (peak * params.compute * np.asarray(utilized))
    nbytes = np.asarray(nbytes, dtype=float)
    cached = np.minimum(nbytes - np.asarray(saved, dtype=float), params.cache_bytes)
    memory = (cached / (bandwidth * params.cache_memory)
              + (nbytes - cached) / (bandwidth * params.memory))
    memory = memory / (1.0 + np.asarray(in_place, dtype=float) * (params.in_place_memory - 1.0))
    return np.maximum(compute, memory)


def with_fixed_cost(params: Params, kernel):
    """An op timed alone: its fixed cost t0 and its kernel. The share ``serial`` of t0 comes
    before the kernel starts (dispatch, launch); the rest overlaps the kernel -- a GPU's host
    returns from the launch and waits while the kernel runs -- so the op takes
    t0 s + max(t0 (1 - s), kernel). NeuSight's sweeps show it: a T4's elementwise ops of
    32-64 MB take a median 8 us more than their bytes need at the streaming rate, of a
    30 us floor for a small op, and those of 128-256 MB nothing more. serial = 1 (a CPU,
    where the thread that dispatches runs the kernel) is t0 + kernel."""
    before = params.t0 * params.serial
    return before + np.maximum(params.t0 - before, kernel)


def predict(flops, nbytes, peak, bandwidth, params: Params, utilized=1.0, fresh=0.0,
            layout=0.0, layout_fresh=0.0, saved=0.0, in_place=0.0):
    """Seconds per op (arrays or scalars): the kernel (kernel_seconds, ``saved`` of its bytes
    a training step's saved activations) behind its fixed cost (with_fixed_cost), plus,
    where the device's page faults were measured, ``fresh`` bytes (fresh_bytes) at
    ``fresh_rate``, and where its layout reorders were, ``layout`` bytes (layout_bytes) at
    ``layout_rate`` and the first touch of their new buffers (``layout_fresh`` bytes) at
    ``fresh_rate``; ``in_place``: 1 for an op writing over its operand (kernel_seconds)."""
    kernel = kernel_seconds(flops, nbytes, peak, bandwidth, params, utilized, saved, in_place)
    return (with_fixed_cost(params, kernel) + fault_seconds(params, fresh)
            + reorder_seconds(params.layout_rate, params.fresh_rate, layout, layout_fresh))


def fault_seconds(params: Params, fresh=0.0, layout_fresh=0.0):
    """Of ``predict``'s seconds, those of page faults: ``fresh`` bytes of the op's own
    allocations and ``layout_fresh`` of its reorders' buffers, first touched at
    ``fresh_rate`` (the reorders' only where the device has a layout rate)."""
    if not params.fresh_rate:
        return 0.0
    touched = np.asarray(fresh, dtype=float) + (np.asarray(layout_fresh, dtype=float)
                                                if params.layout_rate else 0.0)
    return touched / params.fresh_rate


def reorder_seconds(layout_rate: float, fresh_rate: float, layout=0.0, layout_fresh=0.0):
    """Seconds of an op's layout reorders (layout_bytes): ``layout`` bytes at ``layout_rate``
    and the first touch of ``layout_fresh`` of them at ``fresh_rate``; 0 on a device with no
    layout rate (a GPU: cuDNN reads NCHW as it is; a chip measured before this term)."""
    rate = np.asarray(layout_rate, dtype=float)  # one per op, in a fit's rows
    if not rate.any():
        return 0.0
    faults = np.asarray(layout_fresh, dtype=float) / fresh_rate if fresh_rate else 0.0
    return np.asarray(layout, dtype=float) / rate + faults


def streaming_fraction(nbytes, seconds, bandwidth: float, l2_bytes: float,
                       min_rows: int) -> Optional[float]:
    """The fraction of ``bandwidth`` a GPU's kernels stream at: the median bytes/s of those
    moving STREAMING_L2_MULTIPLE x its L2 or more (capped at 1), None where fewer than
    ``min_rows`` do. A vector class's fit holds its memory fraction there: fitted free beside
    a fixed cost that overlaps the kernel, the two trade against each other (NeuSight's
    elementwise sweeps reached 1.0 of the bandwidth that way, their large kernels 0.65-0.87)."""
    nbytes, seconds = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    large = nbytes >= STREAMING_L2_MULTIPLE * l2_bytes
    if large.sum() < min_rows:
        return None
    return min(float(np.median(nbytes[large] / seconds[large])) / bandwidth, 1.0)


def fit(flops, nbytes, seconds, peak, bandwidth, dims=None, units=None,
        compute_cap: float = 1.0, t0: Optional[float] = None, cache: bool = False,
        fresh=0.0, fresh_rate: float = 0.0, offset=0.0, tiles: Tiling = GEMM_TILING,
        memory: Optional[float] = None, k_rise: bool = False,
        overlap: bool = False, pack: bool = False, saved=0.0, in_place=0.0) -> Params:
    """Least squares on log(predicted / measured): relative error, so a 10 us op counts as
    much as a 10 ms one. ``dims``: (batch, m, n, k) arrays of GEMM-like ops, for their tile
    utilization (``tiles``: how they are cut). Parameters are fitted in log space (all
    positive); the fractions are capped at 1 -- ``compute_cap`` for convolutions, where
    Winograd's transforms do up to 2.25x fewer multiplies than the direct count. ``t0``:
    hold the fixed cost at this value (a launch floor known from another op class) instead
    of fitting it. ``cache``: also fit the cache size and rate (CPU probes span
    cache-resident and DRAM-streaming sizes). ``fresh``, ``fresh_rate``: bytes per op
    written to freshly mapped memory, and the measured rate of that first touch, held.
    ``offset``: seconds per row that the fitted terms do not model, held -- a compiled
    call's fixed cost, a convolution's layout reorders (reorder_seconds): the fit compares
    offset + predicted with the measured time, not the measured time less the offset.
    ``memory``: hold the memory fraction at this value, for a sweep with no memory-bound op
    (left free there, it fits some other shortfall, mis-pricing another roof's).
    ``k_rise``: on a GPU too, fit the rate's rise with the reduction length (k_half).
    ``overlap``: also fit the share ``serial`` of t0 before the kernel (with_fixed_cost).
    ``pack``: on a CPU, also fit the operands' packing (utilization's pack_half), from the
    (batch, m, n, k) of ``dims``. ``saved``: bytes per op of a training step's saved
    activations, which bypass the cache (kernel_seconds). ``in_place``: 1 per op writing
    over an operand it reads; where some do and some not, fit their rate (in_place_memory)."""
    flops, nbytes, seconds, in_place = np.broadcast_arrays(
        *(np.asarray(a, dtype=float) for a in (flops, nbytes, seconds, in_place)))
    own_rate = bool(in_place.any() and not in_place.all())
    caps = (math.log(compute_cap), 0.0, 0.0)
    # the rate rises with k (utilization): always fitted on a CPU, on a GPU where asked
    reduction = dims is not None and (not units or k_rise)

    def params(x) -> Params:
        fractions = [math.exp(min(v, c)) for v, c in zip(x[1:4], caps)]
        extra = iter(x[4:])
        cache_bytes, cache_memory = (math.exp(next(extra)), math.exp(next(extra))) \
            if cache else (0.0, 1.0)
        if memory is not None:
            fractions[1] = memory
        return Params(t0 if t0 is not None else math.exp(x[0]), *fractions,
                      cache_bytes=cache_bytes, cache_memory=cache_memory,
                      fresh_rate=fresh_rate, k_half=math.exp(next(extra)) if reduction else 0.0,
                      pack_half=math.exp(next(extra)) if pack else 0.0,
                      serial=math.exp(next(extra)) if overlap else 1.0,
                      in_place_memory=math.exp(next(extra)) if own_rate else 1.0)

    def residuals(x):
        p = params(x)
        used = utilization(*dims, units, p.small_tile, p.k_half, tiles, p.pack_half) \
            if dims is not None else 1.0
        return np.log((predict(flops, nbytes, peak, bandwidth, p, used, fresh, saved=saved,
                               in_place=in_place) + offset) / seconds)

    start, bounds = _start_and_bounds(seconds, nbytes, cache, reduction, overlap, pack,
                                      own_rate)
    # a GPU's tiles: the best tile's rate is a max over tile shapes, so the cost has a local
    # minimum per tile shape; from one start the A100 sweeps' fits stopped in one or another
    # as numpy and scipy builds differed (small_tile 0.055 or 0.25 on the same data)
    tile_starts = TILE_RATE_STARTS if dims is not None and units else (start[3],)
    return params(_least_squares(residuals, start, bounds, tile_starts))


def _start_and_bounds(seconds, nbytes, cache: bool, reduction: bool,
                      overlap: bool = False, pack: bool = False,
                      in_place: bool = False) -> tuple[list, tuple]:
    """fit's starting point and bounds, in log space: (t0, compute, memory, small_tile),
    then the cache's size and rate where fitted, then k_half, pack_half, the serial share
    of t0 and in_place_memory, each where fitted."""
    start = [max(float(np.min(seconds)) * 0.8, 1e-7), 0.5, 0.5, 0.8]
    low, high = [0.0] * 4, [np.inf] * 4  # unbounded (log space) but for what follows
    if cache:
        # with a cache, a fraction of the peak or bandwidth may not go below MIN_FRACTION:
        # a term the rows barely constrain (the memory rate of a class whose probes all fit
        # in the cache) drifted to 1e-159 and priced the first large op at 1e150 s. (The
        # GPU sweeps span both regimes and never needed it; bounding them moves the
        # shipped fits along flat directions, for 0.5-2.7 points more MAPE.)
        low = [0.0] + [MIN_FRACTION] * 3
        # the cache starts at 10 MB at 3x the memory rate (a CPU's L3), within what a cache
        # can be and at most the 90th percentile of the bytes moved, so some rows stream
        # from memory and the memory fraction is fitted on them
        largest = max(float(np.quantile(nbytes, 0.9)), 2e5)
        start = start + [min(1e7, largest / 2), 3.0]
        low, high = low + [1e5, 0.01], high + [min(1e9, largest), 50.0]
    if reduction:
        start, low, high = start + [16.0], low + [0.1], high + [1e5]
    if pack:
        start, low, high = start + [8.0], low + [0.01], high + [1e4]
    if overlap:
        start, low, high = start + [0.7], low + [0.01], high + [1.0]
    if in_place:  # no slower than an op writing a new tensor, at most a cache's rate over
        start, low, high = start + [1.3], low + [1.0], high + [8.0]  # the memory's
    with np.errstate(divide="ignore"):  # log(0) = -inf: no lower bound
        bounds = np.log(np.array(low)), np.log(np.array(high))
    return start, bounds


def _least_squares(residuals, start: list, bounds: tuple,
                   tile_starts: tuple = (0.8,)) -> np.ndarray:
    """The best of several robust least-squares fits in log space: max(compute, memory) makes
    the cost non-convex -- from the balanced start a convolution sweep settled on
    "memory-bound at 5% of the bandwidth" (86% MAPE on V100) where "compute-bound at 95% of
    the peak" fits it at 30% -- so also start compute-bound (x[1:3]: compute, memory); and
    each from every small-tile rate in ``tile_starts`` (x[3])."""
    from scipy.optimize import least_squares  # heavy; only fitting needs it

    starts = []
    for tile in tile_starts:
        balanced = [*start[:3], tile, *start[4:]]
        compute_bound = list(balanced)
        compute_bound[1:3] = [0.9, max(math.exp(bounds[0][2]), 0.1)]
        starts += [balanced, compute_bound]
    fits = [least_squares(residuals, np.log(x0), bounds=bounds, loss="soft_l1", f_scale=0.1)
            for x0 in starts]
    return min(fits, key=lambda f: f.cost).x


def probe_entry(params: Params, ratio, source: str) -> dict:
    """A parameter set fitted on a device's probes as its chip entry's calibration class
    (YAML-ready, rounded), its band the p10 and p90 of measured / predicted (``ratio``) on
    the probes."""
    ratio = np.asarray(ratio, dtype=float)
    return {"t0": float(f"{params.t0:.4g}"), "compute": float(f"{params.compute:.4g}"),
            "memory": float(f"{params.memory:.4g}"),
            "small_tile": float(f"{params.small_tile:.4g}"),
            **({"serial": round(params.serial, 4)} if params.serial < 1.0 else {}),
            "cache_bytes": float(f"{params.cache_bytes:.4g}"),
            "cache_memory": round(params.cache_memory, 4),
            "fresh_rate": float(f"{params.fresh_rate:.4g}"),
            "k_half": float(f"{params.k_half:.4g}"),
            **({"pack_half": float(f"{params.pack_half:.4g}")} if params.pack_half else {}),
            **({"in_place_memory": round(params.in_place_memory, 4)}
               if params.in_place_memory != 1.0 else {}),
            "layout_rate": float(f"{params.layout_rate:.4g}"),
            **({"pointwise_layout_rate": float(f"{params.pointwise_layout_rate:.4g}")}
               if params.pointwise_layout_rate else {}),
            **({"uneven_layout_rate": float(f"{params.uneven_layout_rate:.4g}"),
                "layout_block": params.layout_block} if params.uneven_layout_rate else {}),
            **({"vector_lanes": params.vector_lanes} if params.vector_lanes else {}),
            "band": [round(float(np.percentile(ratio, 10)), 3),
                     round(float(np.percentile(ratio, 90)), 3)],
            "source": f"{source}, MAPE {float(np.mean(np.abs(1 / ratio - 1))) * 100:.1f}%"}


@dataclass
class Calibration:
    """Parameters per chip id and op class, and per-class family defaults."""

    chips: dict      # chip id -> {class: Params}
    families: dict   # "gpu" -> {class: Params}: for chips of the class with no measurements
    unit_counts: dict = None  # chip id -> multiprocessors (SMs / CUs), where known

    def units(self, chip_id: str) -> Optional[int]:
        return (self.unit_counts or {}).get(chip_id)

    def params(self, chip_id: str, chip_class: str, op_class: str,
               tdp: Optional[float] = None, name: str = "",
               vendor: str = "") -> Optional[Params]:
        """``tdp`` (W, the board power), ``name`` and ``vendor`` pick the family of a GPU
        that has no parameters of its own (family_names)."""
        own = self.chips.get(chip_id, {}).get(op_class)
        found = own or next((self.families[f][op_class]
                             for f in family_names(chip_class, tdp, name, vendor)
                             if op_class in self.families.get(f, {})), None)
        if found is None and op_class in FALLBACK:
            return self.params(chip_id, chip_class, FALLBACK[op_class], tdp, name, vendor)
        return found

    def covers(self, chip_id: str, chip_class: str) -> bool:
        return chip_id in self.chips or chip_class in self.families


def family_names(chip_class: str, tdp: Optional[float], name: str = "",
                 vendor: str = "") -> tuple:
    """The families a chip without its own parameters takes them from, first match first:
    an AMD GPU the AMD one; a GPU of 75 W or less the low-power one (its clocks are the
    power cap's, GeForce or not; NVIDIA's boards are the family's); a GeForce board the
    GeForce one; then the class's."""
    if chip_class == "gpu" and vendor == AMD_VENDOR:
        return AMD_FAMILY, chip_class
    if chip_class == "gpu" and tdp is not None and tdp <= LOW_POWER_W:
        return LOW_POWER_FAMILY, chip_class
    if chip_class == "gpu" and geforce(name):
        return GEFORCE_FAMILY, chip_class
    return (chip_class,)


def geforce(name: str) -> bool:
    """Whether a chip's name is one of NVIDIA's consumer GeForce boards."""
    return GEFORCE_MARK in name


# Each number of a calibration entry: its default (None: required) and the open-or-closed
# range it must lie in -- (low, high, low allowed).
_FIELDS = {"t0": (None, (0.0, math.inf, True)), "compute": (None, (0.0, 10.0, False)),
           "memory": (None, (0.0, 10.0, False)), "small_tile": (1.0, (0.0, 1.0, False)),
           "cache_bytes": (0.0, (0.0, math.inf, True)),
           "cache_memory": (1.0, (0.0, 1000.0, False)),
           "fresh_rate": (0.0, (0.0, math.inf, True)), "k_half": (0.0, (0.0, math.inf, True)),
           "layout_rate": (0.0, (0.0, math.inf, True)),
           "pointwise_layout_rate": (0.0, (0.0, math.inf, True)),
           "uneven_layout_rate": (0.0, (0.0, math.inf, True)),
           "layout_block": (0.0, (0.0, 1024.0, True)),
           "vector_lanes": (0.0, (0.0, 1024.0, True)),
           "serial": (1.0, (0.0, 1.0, False)),
           "pack_half": (0.0, (0.0, math.inf, True)),
           "in_place_memory": (1.0, (0.0, 10.0, False)),
           "matrix_compute": (0.0, (0.0, 10.0, True))}


def _field(entry: dict, name: str, where: str) -> float:
    default, (low, high, closed) = _FIELDS[name]
    if default is None and name not in entry:
        raise FxroofError(f"{where}: a calibration entry needs t0, compute, memory and band; "
                          f"{name} is missing. Measure it again (`fxroof chips measure "
                          "--force`) or remove the entry.")
    try:
        value = float(entry.get(name, default))
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and (value >= low if closed else value > low)
            and value <= high):
        interval = f"{'[' if closed else '('}{low:g}, {high:g}{')' if high == math.inf else ']'}"
        raise FxroofError(f"{where}: {name} is {entry.get(name)!r}; it must be a number in "
                          f"{interval}. Measure it again (`fxroof chips "
                          "measure --force`) or remove the entry.")
    return value


def parse_params(entry: dict, where: str) -> Params:
    numbers = {name: _field(entry, name, where) for name in _FIELDS}
    try:
        band = tuple(float(b) for b in entry["band"])
    except (KeyError, TypeError, ValueError) as e:
        raise FxroofError(f"{where}: a calibration entry needs t0, compute, memory and band "
                          f"(band: {type(e).__name__}: {e}). Measure it again (`fxroof chips "
                          "measure --force`) or remove the entry.") from None
    if len(band) != 2 or not all(math.isfinite(b) and b > 0 for b in band) or band[0] > band[1]:
        raise FxroofError(f"{where}: band is {list(band)}; it is two positive numbers, the p10 "
                          "and the p90 of measured / predicted, p10 first. Measure it again "
                          "(`fxroof chips measure --force`) or remove the entry.")
    return Params(band=band, source=str(entry.get("source", "")), **numbers)


def load(path: str = CALIBRATION_FILE) -> Calibration:
    if not os.path.exists(path):
        return Calibration({}, {})
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    entries = data.get("chips") or {}
    chips = {chip: {c: parse_params(p, f"{path}: {chip}.{c}")
                    for c, p in entry["classes"].items()} for chip, entry in entries.items()}
    families = {fam: {c: parse_params(p, f"{path}: {fam}.{c}") for c, p in classes.items()}
                for fam, classes in (data.get("families") or {}).items()}
    return Calibration(chips, families, {chip: int(entry["units"])
                                         for chip, entry in entries.items() if "units" in entry})
