"""A node's expected time on a chip, of which the roof (fxroof.roofline) is the ceiling.

With ``roof="calibrated"`` (the default) a node's ``predicted_s`` comes from
fxroof.calibration's fitted time model for the chip (its own parameters where it was
measured, its family's otherwise) with a band ``low_s``..``high_s`` (p10..p90 of measured /
predicted in validation; on a GPU priced by the shipped parameters, a step's host costs take
the hosts' spread, pipeline.HOST_BAND); chips with no calibration (CPUs, ASICs, SoCs) and
``roof="ideal"`` use the roof time. ``ideal_s`` is always the roof time.

On an NVIDIA GPU a node's expectation also holds the kernels its ATen node does not show
(fxroof.hidden_kernels: cuDNN's transposes, a convolution's bias add and bias gradient, a
reduction's block combining, a layer norm's weight-gradient kernel) and the bounds its launch
geometry and unaligned operands set. What it reads of the chip -- the fitted parameters per
op class, the SMs and their clock -- comes from fxroof.chip_params.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Optional

from fxroof import calibration as cal, chip_params, hidden_bytes, hidden_kernels, op_classes
from fxroof.chips import Chip
from fxroof.pipeline import (ACCUMULATION_HOST_SHARE, AUTOCAST_HOST_SHARE,
                             CUDNN_PLAN_BUILD_S, GENERATED_KERNEL_HOST_SHARE, HOST_BAND)
from fxroof.roofline import NodeRoof, engine_class, node_roof, peak_for

# A GPU's parameters were fitted on FP32 kernels (NeuSight's sweeps ran with TF32 off; the
# probes time FP32), and a 16-bit tensor-core op takes their share of its own peak: no
# public sweep measures that share. The H200's bf16 steps at batch 64-256 found it
# optimistic -- measured / predicted p90 2.03 where the band's upper edge was 1.63
# (benchmarks/README.md, "An H200") -- so such a node's band reaches 1.25x higher.
HALF_PRECISION_KEYS = ("fp16", "bf16", "fp8")
HALF_PRECISION_BAND_WIDENING = 1.25
# The products a matrix engine streams at the chip's streaming rate when memory-bound
# (_matrix_engine_gemm); a batched one (bmm) keeps the GEMM class's fitted fraction.
PLAIN_PRODUCTS = ("mm", "addmm")
# Fused attention that streams its keys and values at the chip's streaming rate where few
# queries make it memory-bound (a decode step's): cuDNN's forward, which PyTorch runs on
# Hopper and Blackwell (fxroof.target.prefers_cudnn), and flash's (Ampere, Ada), which
# splits a long cache across SMs. On the workplace's H200 (BF16, one query, 32 heads of 128)
# cuDNN's kernels read KV caches of 67 MB-2.1 GB at 3.0-4.5 TB/s, 0.63-0.94 of the
# bandwidth, where the GEMM class's memory fraction (0.39) priced them 1.6-2.4x long
# (benchmarks/bench_decode.py); flash's split-KV kernels read 134 MB-1 GB at 2.7-3.9 TB/s
# (benchmarks/decode_backends_probe.py). Memory-efficient attention does not split: at one
# query it runs a block per batch and head, 0.48-0.50 TB/s at batch 1 (32 blocks on 132
# SMs), 2.6 at batch 8 -- not a stream, it keeps the GEMM class's fraction.
STREAMING_ATTENTION_OPS = ("_scaled_dot_product_cudnn_attention", "_cudnn_attention_forward",
                           "_scaled_dot_product_flash_attention", "_flash_attention_forward")
STREAMING_PRODUCT_TILE = 128  # output rows and columns a tile; see _fills_the_gpu
# A narrow convolution (fewer than 8 input channels: an image's 3) that PyTorch would run on
# a GPU's tensor cores (TF32, BF16, FP16) runs on its CUDA cores instead (engine_class), and
# there at a third of their peak or less: the 15 such nodes of the H100's and H200's
# profiles took 0.08-0.46 of the FP32 peak, median 0.30 (benchmarks/fit_launch_geometry.py;
# resnet50's 7x7 stem 0.30-0.46, vit_b_16's patch embedding 0.17-0.39, vgg16's 3x3 stem
# 0.11, ConvNeXt's 4x4 one 0.08: benchmarks/README.md, "GPU: an H100 measured"). The
# median share prices such a node in place of the conv class's fitted rate and its tiling
# (the share is the whole kernel's). With TF32 off an fp32 one keeps the FP32 fit, whose
# sweeps hold 3-channel convolutions.
NARROW_CONV_COMPUTE = 0.30
# ... and the backward of such a convolution that computes the weight gradient alone -- the
# network's first layer, whose input needs no gradient (op_classes.weight_gradient_only):
# on the H200 (benchmarks/conv_kernels.py record --no-input-gradient, ResNet's 7x7 and
# VGG's 3x3 stems at batch 64 and 256, fp32 / bf16 / fp16, NCHW and channels-last: 24
# backwards) its kernels took 0.20-1.66 of the FP32 peak, median 0.46 -- 0.21-0.23 for an
# NCHW 3x3 one or any fp32 3x3, 1.4-1.7 for cuDNN's fp16 first-layer kernel channels-last
# (benchmarks/README.md, "GPU: cuDNN's transposes and a convolution's bias").
NARROW_WEIGHT_GRADIENT_COMPUTE = 0.46
# A channels-last depthwise convolution and its backward run cuDNN's depthwise kernels on
# the CUDA cores (op_classes.cudnn_depthwise), not the dense kernels the conv classes were
# fitted on: timed per node (benchmarks/fit_launch_geometry.py, the median over the nodes,
# each node's time less the bias add that follows it, hidden_kernels.bias_add_s),
# ConvNeXt-T's 18 7 x 7 forwards in bf16 (batch 256) took 0.145-0.196 of the FP32 peak on
# the H100 and 0.071-0.200 on the H200, median 0.15, where the class's rate and its rise with the
# reduction length priced them at 0.39; in fp32 (batch 64, H200) 0.025-0.083, median 0.044;
# their fp32 backwards 0.0089-0.0115, median 0.0097, where the class had priced them 27-37x
# short (ConvNeXt-T's fp32 training step at 0.55x of its measurement). Each share prices
# such a node in place of the class's rate, tiles and rise. Two keep their class's pricing:
# a bf16 backward, never timed, and an fp16 forward -- 0.157-0.206 on the H200 (median
# 0.165), but priced at its share (0.128 before the bias add was taken off), timm's fp16
# ConvNeXt steps on the RTX 3090 and 4090 moved further from their measurements, 1.01-1.23x
# -> 1.11-1.28x (benchmarks/README.md).
CUDNN_DEPTHWISE_COMPUTE = {("convolution", "bfloat16"): 0.15,
                           ("convolution", "float32"): 0.044,
                           ("convolution_backward", "float32"): 0.0097}
# ... and an fp16 forward whose filter is wider than 7 x 7 (WIDEST_FAST_DEPTHWISE_FILTER,
# its area): cuDNN runs it channels-last at about a hundredth of the FP32 peak, a tenth of
# the dense classes' rate that prices a 7 x 7 one right. timm's RTX 4090 files time it three
# ways (FP16 autocast): ConvMixer's 9 x 9 networks run slower channels-last than NCHW, where
# ATen's kernel runs them (1536/20: 7,575 against 3,361 ms a 1,024 images, PyTorch 2.4;
# 1024/20: 1,115 ms in 2.4 against 520 in 2.9.1), and torch.compile, which makes them
# channels-last, took 1024/20 from 520 to 976 ms (2.9.1); ConvMixer-768/32's 7 x 7 ones run
# faster channels-last (1,227 against 1,742 ms), priced within 2% at the class's rate. The
# share solves each channels-last eager step, the rest priced as usual: 0.0109 (1536/20)
# and 0.0125 (1024/20), their mean shipped; the compiled step, held out, is then priced
# 1.13x its measurement, 0.22x at the class's rate (benchmarks/fit_wide_depthwise.py). The
# same library's kernels are assumed on every NVIDIA GPU; only Ada's were timed.
WIDE_FILTER_DEPTHWISE_COMPUTE = 0.0117
WIDEST_FAST_DEPTHWISE_FILTER = 49
# cuDNN's TF32 weight-gradient kernels on Hopper (sm90_xmma_wgrad_indexed_implicit_gemm_
# ..._tf32f32) run a convolution's multiply-adds at about half the rate of its input-gradient
# (dgrad) kernels; BF16's run at about the same. Timed per kernel on the H100 and the H200
# (cuDNN 9.19, batch 256: benchmarks/measured/conv-layouts/*-conv-kernels-b256.json,
# `benchmarks/conv_kernels.py summary`), weight over input gradient for the same FLOPs:
# ResNet-50's 3x3 kernels at 56, 14 and 7, NCHW and channels-last, 1.73-2.23 in TF32
# (median 2.05) against 0.95-1.27 in BF16; ResNeXt's grouped 3x3 ones 2.3-3.2 against
# 1.18-1.20; 1x1 ones 0.63-1.68 against 0.56-1.20, which keep the class's rate. The conv
# classes price both gradients at one rate, so on a Hopper GPU a TF32 backward over a kernel
# wider than 1x1 takes its weight gradient at half of it. Other GPUs keep the one rate: the
# public TF32 training steps of older cuDNNs on A100s moved both ways under it
# (benchmarks/README.md, "TF32 weight gradients on Hopper at half the rate").
TF32_WEIGHT_GRADIENT_SLOWDOWN = 2.0
# A grouped convolution (ResNeXt's, RegNet's) runs cuDNN's grouped implicit-GEMM kernels,
# not the dense ones the conv classes were fitted on. They pack several groups into one tile
# of output channels and compute it as a dense block, so a group of c channels takes the work
# of a tile's W columns (kernel names: TF32 "tilesize256x32x32_g8" at 4 channels a group,
# "128x32x32_g1" at 32; BF16 "64x64x64_g16" and "_g2"), and run that padded work at a rate
# per SM and clock well below the tensor cores' peak. Timed per kernel on the H100 and H200
# (benchmarks/measured/conv-layouts/*-conv-kernels-b256.json: ResNeXt's grouped 3x3 at 56
# and 7, channels-last forwards), FLOPs x W / c over the kernel's time, per SM and clock,
# was 360-450 in TF32 (median 406) and 1260-1380 in BF16 (median 1317), where the conv class
# had priced those kernels 1.7-3.0x short. A grouped convolution or its backward on an
# NVIDIA GPU of compute capability 8 or more (those kernels are sm80_ and sm90_ ones) takes
# that rate on its own SMs and clock, at most its engine's peak; FP16 takes BF16's.
# Per SM and clock, not as a share of the peak: read as Hopper's shares of the peak (0.21,
# 0.35), the rates priced the A100's and the GeForce boards' grouped models slower than
# measured (benchmarks/README.md, "GPU: cuDNN's grouped convolutions").
GROUPED_CONV_TILE_CHANNELS = {"tf32": 32, "bf16": 64, "fp16": 64}
GROUPED_CONV_SM_CLOCK_FLOPS = {"tf32": 410.0, "bf16": 1300.0, "fp16": 1300.0}


class NodeTime(NamedTuple):
    ideal_s: float           # the roof time (plus a measured chip's per-op overhead)
    predicted_s: float       # the time model's expectation
    low_s: float             # p10 of the band
    high_s: float            # p90 of the band
    model: str               # "calibrated" | "ideal"
    host_s: float = 0.0      # the fixed cost t0 the host spends issuing it
    faults_s: float = 0.0    # of predicted_s, the page faults of its allocations (a CPU's)
    kernel_s: float = 0.0    # the device's part: what remains once the host's is overlapped
    host_band: Optional[tuple] = None  # p10, p90 of the host's cost over host_s where the
                                       # host is not the one measured (pipeline.HOST_BAND);
                                       # None: the band's edges scale it as the kernel
    # where kernel_s goes (fxroof.prediction.TIME_PARTS): the roof, max(FLOPs / peak,
    # bytes / bandwidth) ...
    roof_s: float = 0.0
    launch_s: float = 0.0    # ... the launch geometry's bound beyond the fitted kernel ...
    extra_s: float = 0.0     # ... and work the node's counted bytes do not show


def node_time(record: dict, chip: Chip, roof: str = "calibrated",
              roof_of_node: Optional[NodeRoof] = None) -> NodeTime:
    """The predicted time of one node on ``chip`` (seconds), with its band."""
    bounds = roof_of_node or node_roof(record, chip)
    ideal = bounds.predicted_s
    reserve = op_classes.empty_allocation(record) and chip_params.params(chip, "copy") is not None
    if roof == "calibrated" and (reserve or chip.cls == "gpu" and op_classes.allocation(record)):
        # no kernel: PyTorch's CUDA caching allocator hands out a block on the host, inside
        # the call that asked for it (batch norm's reserve, one per layer of a CNN), where
        # the copy class's fitted launch (~30 us on NeuSight's hosts) overpriced each. On a
        # CPU the reserve, empty, is made inside the batch norm's C++ call too; timed from
        # Python node by node it took 30-170 us on this project's AMD CPU (the dispatch
        # after a long op runs cold), which the copy class had learnt as its t0 and priced
        # mobilenet_v2's 52 reserves at 2.9 ms of a 20 ms eager step
        return NodeTime(ideal, 0.0, 0.0, 0.0, "calibrated")
    op_class = op_classes.op_class_on(record, chip.cls)
    params = chip_params.params(chip, op_class) \
        if roof == "calibrated" and op_class is not None else None
    if params is None:
        return NodeTime(ideal, ideal, ideal, ideal, "ideal")
    peak, key, params, used = _compute_rate(record, chip, op_class, params)
    moved = record["bytes"] + _second_pass_bytes(record, chip, op_class) \
        + (hidden_bytes.reread_gradient_bytes(record) if chip.cls == "gpu" else 0) \
        - hidden_kernels.copied_bytes(record, chip)
    fresh, layout, layout_fresh = _faults_and_reorders(record)
    saved = min(hidden_bytes.saved_bytes(record), moved)  # through memory, not the cache
    params = dataclasses.replace(params, layout_rate=cal.layout_rate_of(params, record))
    in_place = float(op_classes.in_place(record))
    expected = float(cal.predict(record["flops"], moved, peak, chip.bandwidth, params,
                                 used, fresh, layout, layout_fresh, saved, in_place)) \
        + hidden_kernels.transpose_s(record, chip, key) \
        + hidden_kernels.global_reduce_s(record, chip) \
        + hidden_kernels.layer_norm_weight_gradient_s(record, chip) \
        + hidden_kernels.bias_add_s(record, chip) + hidden_kernels.bias_gradient_s(record, chip) \
        + hidden_kernels.contiguous_copy_s(record, chip)
    kernel = float(cal.kernel_seconds(record["flops"], moved, peak, chip.bandwidth, params,
                                      used, saved, in_place))
    # a kernel its grid holds back, or its unaligned operands, not its bytes
    bound = max(hidden_kernels.launch_bound_s(record, chip),
                hidden_kernels.unaligned_gemm_s(record, chip, key))
    fitted = kernel
    if bound > kernel:  # the longer kernel, behind the same overlapped fixed cost
        expected += float(cal.with_fixed_cost(params, bound) - cal.with_fixed_cost(params,
                                                                                   kernel))
        kernel = bound
    # the device's part: the kernel and what follows it (faults, reorders, transposes), less
    # the fixed cost, which inside a step the host spends while earlier kernels run
    device = kernel + expected - float(cal.with_fixed_cost(params, kernel))
    low, high = params.band
    if chip.cls == "gpu" and key in HALF_PRECISION_KEYS and op_class in op_classes.MATRIX_CLASSES:
        high *= HALF_PRECISION_BAND_WIDENING
    roof_s = max(record["flops"] / bounds.peak, record["bytes"] / chip.bandwidth)
    host = params.t0 * _host_share(record, chip)
    if chip.cls == "gpu" and record.get("plan_build"):  # the host builds, then launches
        expected += CUDNN_PLAN_BUILD_S
        host += CUDNN_PLAN_BUILD_S
    return NodeTime(ideal, expected, expected * low, expected * high, "calibrated", host,
                    float(cal.fault_seconds(params, fresh, layout_fresh)), device,
                    _host_band(chip), roof_s, kernel - fitted, device - kernel)


def _host_share(record: dict, chip: Chip) -> float:
    """A node's host cost over its class's t0 (fitted on ops Python issues): less for an op
    issued from C++ inside another -- the autograd engine's gradient sums and, on a GPU, the
    casts CUDA's autocast makes in an op's kernel -- and for a Triton kernel Inductor's
    wrapper launches on a GPU (fxroof.pipeline gives each share)."""
    if record.get("accumulates"):
        return ACCUMULATION_HOST_SHARE
    if chip.cls == "gpu" and record.get("autocast_internal"):
        return AUTOCAST_HOST_SHARE
    if chip.cls == "gpu" and op_classes.generated(record):  # a Triton launch (compiled view)
        return GENERATED_KERNEL_HOST_SHARE
    return 1.0


def _compute_rate(record: dict, chip: Chip, op_class: str,
                  params: cal.Params) -> tuple[float, str, cal.Params, float]:
    """What sets a node's compute rate: the peak (FLOP/s) of the engine that runs it and
    its key, the class's parameters as that engine and kernel take them, and the share of
    the peak its tiles put to use (1.0 where it is not tiled)."""
    peak, key = peak_for(chip, engine_class(record, chip), record["dtype"], record["op"])
    if op_classes.unvectorised(record) and params.vector_lanes:
        peak /= params.vector_lanes  # scalar code: one lane of the vector unit at a time
    if op_class == "conv_cl":  # a CPU's channels-last grouped convolution: lanes left idle
        peak /= op_classes.lane_padding(record, chip_params.vector_lanes(chip))
    if op_class in op_classes.CONV_CLASSES and key != "fp32":
        params = _matrix_engine_conv(chip, params)
    elif chip.units.get(key) == "matrix":
        params = _matrix_engine_gemm(record, chip, params, key)
    if op_class == "gemv" or record["op"] in STREAMING_ATTENTION_OPS:
        params = _at_streaming_rate(chip, params)
    share = _cuda_core_conv_share(record, chip)
    if share:  # the measured share is of the whole kernel, tiles and reduction included
        return peak, key, dataclasses.replace(params, compute=share), 1.0
    peak /= _tf32_weight_gradient_slowdown(record, chip, key)
    grouped = _grouped_conv_share(record, chip, key)
    if grouped:  # in place of the class's rate, tiles and rise
        return peak, key, dataclasses.replace(params, compute=grouped), \
            _grouped_tile_use(record, key)
    dims = op_classes.gemm_dims(record) if op_class in op_classes.MATRIX_CLASSES else None
    used = cal.utilization(*dims, chip_params.tile_units(chip, op_class), params.small_tile,
                           params.k_half, cal.tiling(op_class), params.pack_half) \
        if dims is not None else 1.0
    return peak, key, params, used


def _matrix_engine_gemm(record: dict, chip: Chip, params: cal.Params,
                        key: str) -> cal.Params:
    """A product's parameters on a matrix engine: the sustained share of the engine's peak where
    one was measured (Params.matrix_compute), and for a plain product (mm, addmm) whose tiles
    fill a GPU the shipped parameters price, or a 16-bit one a single tile tall, memory at least
    at the chip's streaming rate (its elementwise class's). The GEMM class's own memory fraction
    (0.39-0.59 of the bandwidth) was fitted on FP32 SIMT products, whose memory-bound ones are
    skinny and slow for reasons of their own; a tensor-core product of low intensity over many
    rows streams its operands as a copy does -- ConvNeXt-T's 96- to 768-wide Linear layers in
    BF16 and FP16 ran at 0.65-0.82 of an H100's bandwidth and 0.52-0.78 of an H200's
    (benchmarks/measured/h100- and h200-profile-convnext_tiny-*.json). Batched products (bmm)
    keep the fit: BERT's unfused attention products (384 x 384 outputs over K = 64) were priced
    right by it on Lambda's boards and 5-15% fast at the streaming rate, and no kept profile
    times one. So do skinny ones (_fills_the_gpu), but a 16-bit product of at most one tile's
    rows or columns (_one_tile_tall), which cuBLAS splits along K and streams: on the
    workplace's H200 (BF16, weights of 4096 x 11008, each read once) products of 2 to 128 rows
    took 25.0-29.9 us, as one row's matrix-vector product (25.2-27.6 us, 3.0-3.6 TB/s), where
    the GEMM fraction put them at 48.5-50.6 us (benchmarks/bench_decode.py): a batched decode
    step's projections. VGG-16's BF16 classifier at 256 rows (two tiles tall) kept the fit:
    1.30-1.54x long at it, 0.65-0.77x at the streaming rate (the H100's profile)."""
    if params.matrix_compute:
        params = dataclasses.replace(params, compute=params.matrix_compute)
    if record["op"] not in PLAIN_PRODUCTS or chip.cls != "gpu" or chip.calibration \
            or not (_fills_the_gpu(record, chip) or _one_tile_tall(record, key)):
        return params
    streaming = _streaming_memory(chip)
    if streaming is None:
        return params
    return dataclasses.replace(params, memory=max(params.memory, streaming))


def _at_streaming_rate(chip: Chip, params: cal.Params) -> cal.Params:
    """A matrix-vector product's (or a decode step's streaming attention's,
    STREAMING_ATTENTION_OPS) parameters on a GPU with no gemv class of its own (every
    shipped fit: NeuSight swept no GEMV, so the class falls back to the GEMM's): memory at the
    chip's streaming rate (its elementwise class's). cuBLAS runs one row as a level-2 kernel
    that reads the matrix once across every SM, a stream like a copy's, where the GEMM class's
    memory fraction (0.39 of an H100's bandwidth, 1.0 of an A100 80GB's) was fitted on tiled
    FP32 products. Public decode steps, batch 1, weights streamed once per token: a Llama-2-7B
    on an RTX 4090 at 65 tokens/s (meta-pytorch/gpt-fast issue 27), 15.4 ms a step, where the
    GEMM fraction (0.54) put its matrix-vector products alone at 24 ms; calm's author reads
    cuBLAS at about 955 of the 4090's 1008 GB/s (zeux/calm, README); gpt-fast's A100 80GB at
    330 W streams about 1700 GB/s at best, 0.83 of 2039 (its README) -- the A100's streaming
    rate is 0.86. And on the workplace's H100 and H200, whose batch-1 VGG-16 and AlexNet
    steps end in 16-411 MB classifiers, those steps' fp32 predictions went 1.17-1.42x the
    measured to 1.05-1.33x (benchmarks/README.md, "LLM decode, matrix-vector products")."""
    if chip.cls != "gpu" or "gemv" in (chip.calibration or {}):
        return params
    streaming = _streaming_memory(chip)
    if streaming is None:
        return params
    return dataclasses.replace(params, memory=streaming)


def _streaming_memory(chip: Chip) -> Optional[float]:
    """The fraction of a chip's bandwidth a kernel that reads its operands once streams at:
    its elementwise class's memory fraction (None where it has no parameters)."""
    elementwise = chip_params.params(chip, "elementwise")
    return elementwise.memory if elementwise is not None else None


def _one_tile_tall(record: dict, key: str) -> bool:
    """Whether a 16-bit product's output is at most STREAMING_PRODUCT_TILE rows or columns:
    one row of tiles, which cuBLAS splits along the reduction to stream its weights."""
    dims = op_classes.gemm_dims(record)
    return key in HALF_PRECISION_KEYS and dims is not None \
        and min(dims[1], dims[2]) <= STREAMING_PRODUCT_TILE


def _fills_the_gpu(record: dict, chip: Chip) -> bool:
    """Whether a product's output holds at least one STREAMING_PRODUCT_TILE-square tile per
    SM: a skinny one (a classifier's few rows over a large weight matrix) is what the GEMM
    class's memory fraction was fitted on, and streams no faster on the tensor cores."""
    dims, units = op_classes.gemm_dims(record), chip_params.multiprocessors(chip)
    if dims is None or not units:
        return False
    batch, m, n, _ = dims
    tile = STREAMING_PRODUCT_TILE
    return batch * math.ceil(m / tile) * math.ceil(n / tile) >= units


def _tf32_weight_gradient_slowdown(record: dict, chip: Chip, key: str) -> float:
    """How many times longer a node's multiply-adds take than its engine's rate allows:
    for a TF32 convolution backward on a Hopper GPU over a kernel wider than 1x1, dense or
    grouped (TF32_WEIGHT_GRADIENT_SLOWDOWN), the weight gradient -- half the node's
    multiply-adds, or all of them where it computes no input gradient (a first layer) --
    at half the rate; 1.0 for any other node, and on a GPU measured by `chips measure`, whose
    own fit holds its kernels' rates."""
    if key != "tf32" or record["op"] != "convolution_backward" or chip.calibration \
            or (chip.compute_capability or (0,))[0] != 9 \
            or op_classes.pointwise(record) \
            or op_classes.depthwise(record):
        return 1.0
    weight_share = 1.0 if op_classes.weight_gradient_only(record) else 0.5
    return 1.0 + weight_share * (TF32_WEIGHT_GRADIENT_SLOWDOWN - 1.0)


def _grouped_conv_share(record: dict, chip: Chip, key: str) -> Optional[float]:
    """The share of its engine's peak at which cuDNN's grouped kernels run a grouped
    convolution or its backward (GROUPED_CONV_SM_CLOCK_FLOPS on the chip's SMs and clock, at
    most 1) on an NVIDIA GPU of compute capability 8 or more that the shipped parameters
    price; None for any other node or GPU, or one whose SMs or clock are unknown."""
    if key not in GROUPED_CONV_SM_CLOCK_FLOPS or not chip_params.nvidia_gpu(chip) \
            or chip.calibration or (chip.compute_capability or (0,))[0] < 8 \
            or not op_classes.group_width(record):
        return None
    units = chip_params.multiprocessors(chip)
    clock = chip_params.sm_clock_hz(chip, units)
    if not units or not clock:
        return None
    return min(1.0, GROUPED_CONV_SM_CLOCK_FLOPS[key] * units * clock / chip.peaks[key])


def _grouped_tile_use(record: dict, key: str) -> float:
    """The share of its tiles' work a grouped convolution uses: its c channels a group of the
    ceil(c / W) x W columns they take (GROUPED_CONV_TILE_CHANNELS)."""
    channels, tile = op_classes.group_width(record), GROUPED_CONV_TILE_CHANNELS[key]
    return channels / (math.ceil(channels / tile) * tile)


def _host_band(chip: Chip) -> Optional[tuple]:
    """The band of a GPU op's host cost where the shipped t0 prices it: the host issuing
    the ops is not the chip's, and hosts differ (pipeline.HOST_BAND). A chip measured with
    `chips measure` was measured from its own host: its classes' bands hold it (None)."""
    return HOST_BAND if chip.cls == "gpu" and not chip.calibration else None


def _matrix_engine_conv(chip: Chip, conv: cal.Params) -> cal.Params:
    """A convolution's parameters on a matrix engine (TF32, BF16, FP16; a CPU's AMX). A
    GPU's fitted convolution rate can pass the FP32 peak -- the kernel data ran with TF32
    off, and cuDNN's FP32 Winograd kernels do up to 2.25x fewer multiplies than the direct
    count -- but on the matrix engine a convolution is an implicit GEMM doing every
    multiply: no faster than its peak, and on a GPU no faster than the chip's GEMMs on the
    same engine (their share of the peak -- measured on the matrix engine where it was,
    Params.matrix_compute -- and of it a narrow tile's)."""
    gemm = chip_params.params(chip, "gemm") if chip.cls == "gpu" else None
    if gemm is None:
        return dataclasses.replace(conv, compute=min(conv.compute, 1.0))
    share = gemm.matrix_compute or gemm.compute
    return dataclasses.replace(conv, compute=min(conv.compute, share, 1.0),
                               small_tile=min(conv.small_tile, gemm.small_tile))


def _cuda_core_conv_share(record: dict, chip: Chip) -> Optional[float]:
    """The measured share of the FP32 peak at which a GPU runs a convolution on its CUDA
    cores, in kernels other than those its conv class was fitted on; None for any other
    node: a narrow one its tensor cores would have run (NARROW_CONV_COMPUTE), a channels-last
    depthwise one (or its backward) of CUDNN_DEPTHWISE_COMPUTE's ops and dtypes, or an fp16
    forward of a filter wider than 7 x 7 (WIDE_FILTER_DEPTHWISE_COMPUTE), on an NVIDIA GPU
    the shipped parameters price -- cuDNN's; a GPU measured by `chips measure`
    timed a depthwise forward among its channels-last convolution probes
    (probes.GPU_CONV_PROBES), and its conv_cl class holds it."""
    if _narrow_off_tensor_cores(record, chip):
        return NARROW_WEIGHT_GRADIENT_COMPUTE if op_classes.weight_gradient_only(record) \
            else NARROW_CONV_COMPUTE
    if chip_params.nvidia_gpu(chip) and not chip.calibration and op_classes.cudnn_depthwise(record):
        if record["dtype"] == "float16" and \
                (op_classes.depthwise_filter_area(record) or 0) > WIDEST_FAST_DEPTHWISE_FILTER:
            return WIDE_FILTER_DEPTHWISE_COMPUTE
        return CUDNN_DEPTHWISE_COMPUTE.get((record["op"], record["dtype"]))
    return None


def _narrow_off_tensor_cores(record: dict, chip: Chip) -> bool:
    """Whether a node is a narrow convolution a GPU would have run on its tensor cores, had
    it had the channels (NARROW_CONV_COMPUTE)."""
    if chip.cls != "gpu" or not op_classes.narrow(record):
        return False
    return peak_for(chip, "matrix", record["dtype"], record["op"])[1] != "fp32"


def _second_pass_bytes(record: dict, chip: Chip, op_class: str) -> int:
    """The inputs a GPU's training norm kernels read again (hidden_bytes.second_pass_bytes),
    where the chip's parameters for them are the single-pass norm class's (a chip measured
    for a training norm class prices its passes itself)."""
    if chip.cls != "gpu" or op_class not in op_classes.TRAINING_NORM_CLASSES:
        return 0
    shipped = chip_params.calibration().chips.get(chip.id, {})
    if any(chip.calibration.get(c) or shipped.get(c) for c in op_classes.TRAINING_NORM_CLASSES):
        return 0
    return hidden_bytes.second_pass_bytes(record)


def _faults_and_reorders(record: dict) -> tuple:
    """(fresh, layout, layout_fresh) bytes for calibration.predict: the faults the step's
    allocator replay gives the node (or the isolated node's), and its reorders' bytes."""
    fresh, layout_fresh = hidden_bytes.faulted_bytes(record)
    return fresh, hidden_bytes.layout_bytes(record)[0], layout_fresh
