"""Kernels whose time their launch geometry sets, not their bytes: ATen's CUDA batch norm
and pooling over NCHW tensors, and its layer norm of short rows.

Which batch norms: eager PyTorch hands a CUDA batch norm of fp32 or fp16 input to cuDNN
(``_select_batch_norm_backend``, aten/src/ATen/native/Normalization.cpp) and one of bf16
input -- every one under bf16 autocast -- to ATen's own kernels, the ones modelled here.
fxroof's timing pass runs the graph's ``native_batch_norm``, ATen's kernels, whatever the
dtype, so a profile's eager step beside its summed nodes tells how cuDNN's compare. In
training cuDNN's kernels are faster than ATen's: the fp32 training profiles' forwards sum
to 1.18x (ResNet-50 at batch 64, H100) and 1.36x (MobileNetV2 at 64, H200) their eager
steps. Taking the whole shortfall as the norms', cuDNN's forward norms took about their
class's time in ResNet-50 (4.9 ms against 4.9; ATen's 7.5) and 1.6x it in MobileNetV2
(3.3 ms against 2.1; ATen's 6.8): between the class and the bound, and bounding them moved
the fp32 training steps both ways, so the training bounds apply to bf16 alone. In eval,
cuDNN's kernel is no faster than ATen's transform: the H200's fp32 EfficientNet-B0 at batch
256, whose 49 batch norms took 6.5 ms of ATen's time where their bytes stream in 3.7, ran
its eager step in 25.8 ms against its nodes' 24.4 -- with cuDNN's at the bytes' time it
would have taken about 21.6. So an eval batch norm takes the transform's bound in any dtype
(fxroof.roofline applies them so; fp16 eval steps were not timed).

An eval-mode batch norm over an NCHW tensor runs ATen's per-plane transform kernel
(``batch_norm_transform_input_kernel``, launched by ``batch_norm_elemt_cuda_template`` in
aten/src/ATen/native/cuda/Normalization.cuh; ``batch_norm_elementwise`` picks it for a
contiguous input, Normalization.cu). It is not a vectorised TensorIterator loop: each block
takes one channel's plane of some images, and each thread loads, scales and stores one
element at a time, ``tf`` threads across a plane of H x W elements::

    tf = max(threads(HW / 4), min(threads(HW), 64)),  tb = max(64 / tf, 1)
    grid = (C, min(256 * 1024 / C, ceil(N / tb)))      (threads(n): 32, 64 ... 512 >= n)

So a thread makes ``rows x ceil(HW / tf)`` dependent memory round trips, one element each,
and a GPU holds only so many threads: the kernel is latency-bound where its bytes would
stream faster (always for 16-bit elements on an H100: half the bytes a round trip), and
where the planes are small (7 x 7: 49 of 64 threads busy, one trip a block) it is bound by
how fast the SMs take new blocks. Timed per node on an H100 (resnet50, batch 256, bf16; 12
plane shapes from 64 x 112 x 112 to 2048 x 7 x 7; benchmarks/README.md, "GPU: an H100
measured"):

    time = max(waves x trips x ITERATION_LATENCY_S, blocks / SMs x BLOCK_ISSUE_S)
    waves = blocks / (SMs x resident blocks an SM holds of tf x tb threads)

with a round trip of 0.62 us (per wave and trip: 0.57-0.80, median 0.62) and 86 ns a block
per SM (84-90 where blocks are short): resnet50's nodes a median 1.02 of the bound,
inception_v3's 1.19, the H200's 1.10-1.11 -- where the elementwise class's bandwidth had
priced them 1.5-9x short. The resident limits are the CUDA C++ Programming
Guide's per compute capability ("Technical Specifications per Compute Capability").
Every constant here is re-derived from the kept profiles, node by node and leaving each
model out, by benchmarks/fit_launch_geometry.py.

A training batch norm first reduces each channel's statistics
(``batch_norm_collect_statistics_kernel``: a block of 512 threads per channel, each thread a
Welford loop over its share of N x H x W, one element a round trip) and its backward each
channel's two sums (``batch_norm_backward_reduce_kernel``, the same grid, two tensors a
round trip): with 64 channels, 64 blocks on 132 SMs. On the H100 (resnet50's fp32 training
step at batch 64; 12 shapes each) the forward took the transform's time plus
STATISTICS_ITERATION_S a round trip (0.45-0.73 us where a thread makes 128 or more) and the
backward BACKWARD_REDUCTION_ITERATION_S (0.86-1.2 us a trip once the transform's time is
taken off); the classes' times had priced those nodes 1.53x and 1.31x short in sum. The
backward's bound is its sums alone (bound_s).

ATen's NCHW adaptive poolings (``adaptive_average_pool`` and ``adaptivemaxpool``, their
backwards' atomic kernels; aten/src/ATen/native/cuda/AdaptiveAveragePooling.cu and
AdaptiveMaxPooling2d.cu) launch a block of 32 x 8 threads per (image, channel) plane, a
thread per output element of the plane: for AlexNet's and VGG's pools (6 x 6 and 7 x 7
outputs, each the mean of one element) 36 or 49 busy threads of 256. Blocks that short are
the batch norm's issue-bound case above with four times the warps, and the SMs took them so:
VGG-16's 131,072 planes at batch 256 in 346 us on the H100 and the H200, fp32 and bf16
alike (the same time for half the bytes), where the class's bandwidth had priced 14-20 us.
The bound is planes x ADAPTIVE_POOL_WARPS x WARP_ISSUE_S / SMs, WARP_ISSUE_S being
BLOCK_ISSUE_S over the batch norm's two warps a block -- not fitted on these nodes: it
gives VGG-16's 1.01x and AlexNet's (65,536 planes, H200) 0.87x of their times.

ATen's NCHW pooling kernels (``max_pool_forward_nchw``, ``avg_pool2d_out_cuda_frame`` and
their backwards, aten/src/ATen/native/cuda/DilatedMaxPool2d.cu and AveragePool2d.cu) run a
thread per output element that walks its window with scalar loads and bounds checks. On the
H100 every such node took 1.6-2.1 ns an output element per SM (24 nodes of 5 models: max
pools 3x3 and 2x2, 3x3 average pools, a max pool's backward per input gradient element; bf16
and fp32 alike), the median POOL_OUTPUT_S: 0.90-1.22 of the bound per model, the H200's
0.99-1.22 -- where the elementwise class's bandwidth had priced them 1.5-9.6x short.

ATen's layer norm (``vectorized_layer_norm_kernel``, aten/src/ATen/native/cuda/
layer_norm_kernel.cu) runs a block per row: a row of a ConvNeXt's 96 channels costs the
block's whole life -- loads, two block-wide reductions, stores -- for 96 elements. Over
ConvNeXt-T's four stages on the H100 (bf16 autocast, 12544-802816 rows of 96-768) an SM
took LAYER_NORM_ROW_S + N x LAYER_NORM_ELEMENT_S a row of N (least squares; its nodes a
median 1.01 of the bound, the H200's 1.07), where the norm class had priced them 3.4-4.5x
short; vit_b_16's 768-wide rows
took 1.59x this (not fitted; NeuSight's LayerNorm sweeps, 264 columns and more, hold no
short rows).

A layer norm's backward runs the input gradient -- a block per row again, a pass over the
node's counted bytes, which its class prices -- and then the weight and bias gradients in a
kernel of their own (``GammaBetaBackwardCUDAKernelTemplate``, layer_norm_kernel.cu, PyTorch
2.7 on; the 32 x 32 kernel before it had the same grid): a block of 32 x 32 threads per 32
columns walks all M rows, 256 a trip, so a 768-wide row gives 24 blocks to 132 SMs and
M / 256 dependent trips each. Only a tall, narrow problem (M > 65536 and N / 32 under half
the SMs) splits the rows across blocks, and its partial sums stream. Those trips at the
batch norm's round trip, ITERATION_LATENCY_S (not fitted on these nodes), on top of the
class's time, put ConvNeXt-T's fp32 backwards at batch 64 on the H200 (rows of 192 to 768)
at 0.77-1.06x of their times, where the class alone had priced 0.30-0.75x, and ViT-B/16's
(768 wide, never fitted on either) at 0.75x, 0.51x before; a tall, narrow one (96 wide,
200,704 rows) stays at the class's 0.70x (benchmarks/README.md, "A layer norm's weight
gradient").

ATen's NCHW depthwise convolution (``conv_depthwise2d_forward_kernel``, aten/src/ATen/
native/cuda/DepthwiseConv2d.cu; fp32 and bf16, op_classes.ATEN_DEPTHWISE_DTYPES) is a
thread per output element walking its kernel's taps with scalar loads. On the H200 each
node took DEPTHWISE_OUTPUT_S + taps x DEPTHWISE_TAP_S an output element per SM (66 nodes
of EfficientNet-B0 and MobileNetV2 at batch 64-256, 3x3 and 5x5, fp32 and bf16 alike:
1.2-1.6 ns at 9 taps, 2.1-2.8 at 25; least squares on relative error), where the
convolution class, fitted on cuDNN's dense kernels, had priced them 2.2-3.4x short. Its
backward runs two kernels: the input gradient, again a thread per element walking the
taps (DEPTHWISE_INPUT_GRAD_S an input element per SM), and the weight gradient, a block
per channel and tap reducing over the batch and the output plane (DEPTHWISE_WEIGHT_GRAD_S
a multiply-add per SM) -- fitted on MobileNetV2's 17 fp32 3x3 nodes at batch 64 (median
node error 12%; those over 7 x 7 planes take 1.7x the bound), where the class had priced
them 4.5x short; a bf16 backward, never timed, keeps its class's time
(op_classes.ATEN_DEPTHWISE_BACKWARD_DTYPES).

ATen's reduction over a tensor's innermost dimensions (``reduce_kernel``, aten/src/ATen/
native/cuda/Reduce.cuh; op_classes.row_reduction: an SE block's or a global pool's mean over
H x W) gives each output row a group of threads that loads the row, reduces it across the
group and writes one element: a fixed cost a row on top of the row's bytes. On the H200
(EfficientNet-B0's 34 means at batch 256, fp32 and bf16, rows of 49 to 12,544 elements)
an SM took REDUCTION_ROW_S + row bytes x REDUCTION_BYTE_S a row (least squares on relative
error; median node error 4.5%), where the elementwise class, bandwidth alone, had priced
those means 1.8x (fp32) and 2.7x (bf16) short in sum, their 7 x 7 rows 4.7x and 8.5x.
Fitted on EfficientNet alone, it puts MobileNetV2's, ResNet-50's, Inception-v3's and
SqueezeNet's global pools at 0.90-1.06x of their times (two of six nodes, one on each GPU,
took 1.5x and 2.0x: the same shapes measured 1.0x on the other board).

ATen's elementwise loops other than the vectorised one (fxroof's rules name them as their
variant, op_costs.pointwise.loop_variant): an operand broadcast or strided unlike the output
sends TensorIterator's CUDA loop to its legacy kernel (``launch_legacy_kernel`` in
aten/src/ATen/native/cuda/CUDALoops.cuh: 128 threads of 2 or 4 elements, every operand's
offset computed per element with integer divisions), and operands of different dtypes to a
loop that converts each element (``fetch_and_cast``; with a contiguous layout the unrolled
kernel's ``LoadWithCast``). Per node on the kept profiles (EfficientNet-B0's SE scales,
ConvNeXt-T's layer scales forward and backward, ViT-B/16's bias and residual adds; fp32,
bf16 and fp16; H100 and H200), such a loop took elements x LOOP_ELEMENT_S[its kind] +
bytes moved x LOOP_BYTE_S an SM (235 nodes, median node error 4.6%), where the elementwise
class, bandwidth alone, had priced them a median 1.6x short (bf16 broadcasts 2.2x). Nearly
the same per SM on the H100 and the H200, whose bandwidths differ 1.43x: the SM's issue of
scalar loads and offsets, not DRAM, sets the pace (benchmarks/README.md, "GPU: ATen's
elementwise loops"). They are clocked kinds, as the others below.

ATen's reduce kernel summing over the outer dimensions (op_costs.reduction names it
``[columns]``: a bias gradient, (N x H x W, C) summed over its rows) puts its threads across
the outputs and, where a thread would still sum 256 rows or more, splits the rows across
blocks until the GPU is full (``setReduceConfig``, Reduce.cuh; column_reduction_blocks);
the last block of each column to finish then reads every other block's partial sums,
ceil(blocks / the block's height) round trips a thread. Per node on the H200 (ConvNeXt-T's
training step at batch 64, fp32: 8 shapes of 96 to 3072 columns and 3136 to 200704 rows,
13 to 196 trips), the node took its class's time for the bytes plus trips x PARTIAL_TRIP_S
+ GLOBAL_REDUCE_FIXED_S (least squares, one point per shape; global_reduce_s), where the
class alone had priced them 0.10-0.60 of their times; ViT-B/16's, never fitted on, come
out 0.90-1.00x. These are seconds, not cycles: the partials come back from L2, and the
fixed cost is the semaphores' memset and the hand-off between blocks.

cuDNN's NHWC transposes. A tensor-core convolution over NCHW tensors runs between
``nchwToNhwcKernel`` and ``nhwcToNchwKernel`` launches (fxroof.hidden_bytes.transpose_bytes).
An fp32 one streams near the copy rate, but a 16-bit one moves no more elements a second
than the fp32 one, so half the bytes: on the H200 and the H100 alike, ResNet's and VGG-16's
tensors of 10-822 M elements went at TRANSPOSE_ELEMENT_S an element per SM (0.254 ns, the
median of 134 bf16 and fp16 kernels, a stem's left out, each board's 0.24-0.29;
benchmarks/conv_kernels.py transposes), 1.8-2.2 TB/s where the H200 streams an fp32 one at
3.1-3.7 -- the copy rate had priced them 1.2x (H100) to 1.8x (H200) short. Fitted on one
board, the other's kernels come out a median 1.08x (H100) and 0.93x (H200). An element's
shuffle through the SM, not DRAM, sets the pace: a clocked kind.

ATen's linear and cubic interpolations over NCHW tensors (``upsample_bilinear2d_out_frame``
and its 1-d, 3-d and bicubic kin, aten/src/ATen/native/cuda/UpSample*.cu; op_classes.
INTERPOLATION_LOOP_OPS) launch a thread per output position -- out_h x out_w of them, in
blocks of 1,024 -- and loop each over all N x C planes, one dependent load-interpolate-store
round trip a plane: an F.interpolate from 7 x 7 to 14 x 14 is one block of 196 threads on
one SM, however large the batch. (The bilinear kernel has a channels-last twin, a thread per
element, for channels_last inputs of 16 channels or more; PyTorch PRs 127082 and 174578,
which would parallelise the loops, are not in the torch this project pins.) So

    time = waves x N x C x max(INTERPOLATION_TRIP_CYCLES,
                               warps an SM runs x INTERPOLATION_WARP_CYCLES) / SM clock

with waves = ceil(blocks / (SMs x 1,024-thread blocks an SM holds)). With an SM full, a
plane costs the warps' turns: FlagGems' public benchmark of ATen's kernel on an H20
(github.com/flagos-ai/FlagGems PR 5167; (16, 16, 512, 512) and (16, 16, 1024, 1024) fp32,
doubled: 1.548 and 5.987 ms, 7 and 27 waves of 64 warps an SM over 256 planes -- their ratio,
3.87, the waves' 3.86) gives 0.87 us a plane, 27 cycles a warp at Hopper's 1.98 GHz. With
few warps a plane costs at least a load's trip to L2 and back: 279 cycles, the mean L2 hit
an Ada SM sees (222-339 over an L40's SMs; arXiv 2606.22588) -- a floor, not the trip to
DRAM a plane not in L2 takes, which no source here gives per GPU. The bytes would have
priced the first of those kernels 0.3 ms, and EfficientFormerV2-S0's two 7 x 7 -> 14 x 14
interpolations of 1,024 x 1,024 planes on an RTX 4090 1.1 ms each, against 116 ms each here
(benchmarks/README.md, "90 more of timm's models").

Other GPUs' clocks. Every constant was timed on Hopper boards, the H100 SXM and the H200,
whose SMs boost to REFERENCE_CLOCK_HZ. A pooling, layer-norm, depthwise, row-reduction or
non-vectorised elementwise kernel spends its time issuing loads and arithmetic (offsets,
casts) that hit the SM's own cache, so its per-SM time is a count of clock cycles: on
another GPU those kinds (CLOCKED_KINDS) take the constants in cycles, scaled by
REFERENCE_CLOCK_HZ / the GPU's SM clock (an A100's 1.41 GHz: 1.40x). A batch norm's round
trips wait on DRAM, whose latency is in nanoseconds, not SM cycles:
those keep their seconds. The scaling is a stated assumption, no node of a GPU other than
a Hopper board was timed. DeepLearningExamples' EfficientNet-B0 inference at batch 64-256
on the A100 and the V100 (benchmarks/bench_public_gpu.py, never fitted on) went from
0.63-0.86 to 0.66-0.90 of its measured times with it.
"""
from __future__ import annotations

import math
from typing import Optional

ITERATION_LATENCY_S = 0.62e-6   # one dependent load-scale-store round trip, a wave of blocks
BLOCK_ISSUE_S = 86e-9           # an SM taking one more block (short blocks)
# ... a warp of such a block: the transform's short blocks are 64 threads
WARP_ISSUE_S = BLOCK_ISSUE_S / 2
ADAPTIVE_POOL_WARPS = 8         # an adaptive pooling's block: 32 x 8 threads a plane
STATISTICS_ITERATION_S = 0.5e-6           # a Welford round trip, statistics kernel
BACKWARD_REDUCTION_ITERATION_S = 0.9e-6   # a round trip of the backward's two sums
POOL_OUTPUT_S = 1.73e-9         # an SM's time per output element of an NCHW pooling kernel
LAYER_NORM_ROW_S = 148e-9       # an SM's time per layer-norm row ...
LAYER_NORM_ELEMENT_S = 0.40e-9  # ... and per element of it
DEPTHWISE_OUTPUT_S = 0.78e-9    # an SM's time per output element of a depthwise convolution
DEPTHWISE_TAP_S = 0.061e-9      # ... and per tap of its kernel
DEPTHWISE_INPUT_GRAD_S = 2.2e-9     # an SM's time per element of a depthwise input gradient
DEPTHWISE_WEIGHT_GRAD_S = 0.15e-9   # ... and per multiply-add of the backward
REDUCTION_ROW_S = 25e-9         # an SM's time per row of an innermost-dimension reduction ...
REDUCTION_BYTE_S = 0.039e-9     # ... and per byte the row reads
# An SM's time per element of an elementwise loop of each kind (the module's docstring) ...
LOOP_ELEMENT_S = {"strided_loop": 0.237e-9, "strided_casting_loop": 0.408e-9,
                  "casting_loop": 0.297e-9}
LOOP_BYTE_S = 0.026e-9          # ... and per byte it reads and writes
PARTIAL_TRIP_S = 0.36e-6        # a round trip of the reduce kernel's last block over partials
GLOBAL_REDUCE_FIXED_S = 6.4e-6  # ... and the fixed cost of combining blocks at all
TRANSPOSE_ELEMENT_S = 0.254e-9  # an SM's time per element cuDNN's NCHW <-> NHWC kernels move
INTERPOLATION_WARP_CYCLES = 27  # an SM's cycles per warp and plane of an interpolation's loop
INTERPOLATION_TRIP_CYCLES = 279  # ... and at least an L2 hit's round trip a plane
INTERPOLATION_BLOCK = 1024      # the threads of its blocks (min(maxThreadsPerBlock, 1024))
# The SM boost clock of the boards the constants were timed on (H100 SXM, H200: 1.98 GHz)
REFERENCE_CLOCK_HZ = 66.9e12 / (2 * 128 * 132)  # chips.yaml: 66.9 TFLOP/s FP32 over 132 SMs
# The kinds whose time is the SM's clock cycles (the module's docstring)
CLOCKED_KINDS = ("pool", "layer_norm", "dw_conv", "dw_conv_backward", "row_reduction",
                 "transpose", *LOOP_ELEMENT_S)
# FP32 lanes an SM has, by compute capability: the CUDA C++ Programming Guide's "32-bit
# floating-point add, multiply, multiply-add" results per clock cycle per multiprocessor
# (Throughput of Native Arithmetic Instructions), with which a datasheet's FP32 peak is
# SMs x lanes x 2 FLOP x the boost clock
FP32_LANES = {(6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128,
              (8, 7): 128, (8, 9): 128, (9, 0): 128, (10, 0): 128, (12, 0): 128}
# (resident threads, resident blocks) per SM by compute capability (major, minor)
RESIDENT = {(6, 0): (2048, 32), (6, 1): (2048, 32), (7, 0): (2048, 32), (7, 5): (1024, 16),
            (8, 0): (2048, 32), (8, 6): (1536, 16), (8, 7): (2048, 16), (8, 9): (1536, 24),
            (9, 0): (2048, 32), (10, 0): (2048, 32), (12, 0): (1536, 32)}
_MAX_GRID_Y = 65535
_BLOCK_THREADS = 64


def _threads(n: float) -> int:
    """Normalization.cuh's getNumThreads: the smallest of 32, 64, 128, 256, 512 >= n."""
    return next((t for t in (32, 64, 128, 256) if n <= t), 512)


def transform_geometry(shape, multiprocessors: Optional[int],
                       compute_capability: Optional[tuple]) -> Optional[tuple]:
    """(waves x round trips, blocks per SM) of the transform kernel over an NCHW (N, C, ...)
    tensor on an NVIDIA GPU of ``multiprocessors`` SMs; None where the GPU's SMs or resident
    limits are unknown or the shape is not one the kernel takes (fewer than 3 dimensions:
    the channels-last kernel)."""
    limits = RESIDENT.get(tuple(compute_capability or ()))
    if not multiprocessors or limits is None or len(shape) < 3 or 0 in shape:
        return None
    n, c, plane = shape[0], shape[1], math.prod(shape[2:])
    tf = max(_threads(plane // 4), min(_threads(plane), _BLOCK_THREADS))
    tb = max(_BLOCK_THREADS // tf, 1)
    grid_y = min(max(1, min(256 * 1024 // c, math.ceil(n / tb))), _MAX_GRID_Y)
    blocks = c * grid_y
    trips = math.ceil(n / (tb * grid_y)) * math.ceil(plane / tf)
    resident_threads, resident_blocks = limits
    waves = blocks / (multiprocessors * min(resident_blocks, resident_threads // (tf * tb)))
    return waves * trips, blocks / multiprocessors


def batch_norm_transform_s(shape, multiprocessors: Optional[int],
                           compute_capability: Optional[tuple]) -> Optional[float]:
    """Seconds of the transform kernel (transform_geometry), None where it is unknown."""
    geometry = transform_geometry(shape, multiprocessors, compute_capability)
    if geometry is None:
        return None
    trips, blocks_per_sm = geometry
    return max(trips * ITERATION_LATENCY_S, blocks_per_sm * BLOCK_ISSUE_S)


def reduction_trips(shape, multiprocessors: Optional[int],
                    compute_capability: Optional[tuple]) -> Optional[float]:
    """Waves x round trips of a per-channel reduction over an NCHW (N, C, ...) tensor on an
    NVIDIA GPU -- the training batch norm's statistics or its backward's sums: a block of
    512 threads per channel (Normalization.cuh: tf = threads(H x W) across a plane, 512 / tf
    images at a time), at least one wave; None where the SMs or limits are unknown or the
    shape is not NCHW."""
    limits = RESIDENT.get(tuple(compute_capability or ()))
    if not multiprocessors or limits is None or len(shape) < 3 or 0 in shape:
        return None
    n, c, plane = shape[0], shape[1], math.prod(shape[2:])
    tf = _threads(plane)
    ty = max(1, 512 // tf)
    trips = math.ceil(n / ty) * math.ceil(plane / tf)
    resident = min(limits[1], limits[0] // (tf * ty))
    return max(1.0, c / (multiprocessors * resident)) * trips


def batch_norm_reduction_s(shape, multiprocessors: Optional[int],
                           compute_capability: Optional[tuple],
                           seconds_per_trip: float) -> Optional[float]:
    """Seconds of a per-channel reduction (reduction_trips) at ``seconds_per_trip`` a round
    trip, None where it is unknown."""
    trips = reduction_trips(shape, multiprocessors, compute_capability)
    return trips * seconds_per_trip if trips is not None else None


def pool_s(shape, multiprocessors: Optional[int]) -> Optional[float]:
    """Seconds of a thread-per-element NCHW pooling kernel writing a ``shape`` output on an
    NVIDIA GPU of ``multiprocessors`` SMs; None where the SMs are unknown."""
    if not multiprocessors or not shape:
        return None
    return math.prod(shape) * POOL_OUTPUT_S / multiprocessors


def adaptive_pool_s(shape, multiprocessors: Optional[int]) -> Optional[float]:
    """Seconds below which ATen's block-per-plane adaptive pooling (or its backward) over an
    NCHW ``shape`` -- (N, C, H, W) or (C, H, W), the output's or the input gradient's: the
    planes are the same -- runs on an NVIDIA GPU of ``multiprocessors`` SMs: the SMs taking
    its blocks' warps (the module's docstring); None where the SMs are unknown."""
    if not multiprocessors or not shape or len(shape) < 3:
        return None
    planes = math.prod(shape[:-2])
    return planes * ADAPTIVE_POOL_WARPS * WARP_ISSUE_S / multiprocessors


def layer_norm_s(shape, multiprocessors: Optional[int]) -> Optional[float]:
    """Seconds of the block-per-row layer norm over the last dimension of a ``shape`` output
    on an NVIDIA GPU of ``multiprocessors`` SMs; None where the SMs are unknown."""
    if not multiprocessors or not shape:
        return None
    rows, width = math.prod(shape[:-1]), shape[-1]
    return rows * (LAYER_NORM_ROW_S + width * LAYER_NORM_ELEMENT_S) / multiprocessors


# GammaBetaBackwardCUDAKernelTemplate's launch (LaunchGammaBetaBackwardCUDAKernel): columns
# a block takes; rows under which each block height (threads) and rows a trip apply, else
# the last; rows and N / columns below which the rows are not split across blocks
GAMMA_BETA_COLUMNS = 32
GAMMA_BETA_TRIPS = ((64, 1, 8), (128, 8, 64), (256, 16, 128), (math.inf, 32, 256))
GAMMA_BETA_SPLIT_ROWS = 64 * 1024


def layer_norm_weight_gradient_s(rows: int, width: int, multiprocessors: Optional[int],
                                 compute_capability: Optional[tuple]) -> float:
    """Seconds of ATen's weight-and-bias gradient kernel of a layer norm over ``rows`` rows
    of ``width`` elements on an NVIDIA GPU (the module's docstring): its waves of column
    blocks, each walking every row, a round trip per trip; 0 where the rows are split
    across blocks (the partial sums stream: the class's time) or the GPU's SMs or limits
    are unknown."""
    limits = RESIDENT.get(tuple(compute_capability or ()))
    if not multiprocessors or limits is None or rows < 1 or width < 1:
        return 0.0
    if rows > GAMMA_BETA_SPLIT_ROWS and width // GAMMA_BETA_COLUMNS < multiprocessors // 2:
        return 0.0
    height, per_trip = next((h, r) for below, h, r in GAMMA_BETA_TRIPS if rows < below)
    blocks = math.ceil(width / GAMMA_BETA_COLUMNS)
    resident = min(limits[1], limits[0] // (GAMMA_BETA_COLUMNS * height))
    waves = math.ceil(blocks / (multiprocessors * resident))
    return waves * math.ceil(rows / per_trip) * ITERATION_LATENCY_S


def depthwise_conv_s(shape, macs: float, multiprocessors: Optional[int],
                     backward: bool = False) -> Optional[float]:
    """Seconds of ATen's depthwise convolution writing a ``shape`` output with ``macs``
    multiply-adds (the taps: macs per output element), or of its backward whose input
    gradient has ``shape`` (the MACs both gradients'); None where the SMs are unknown.
    Either is elements x a + MACs x b per SM."""
    if not multiprocessors or not shape:
        return None
    per_element, per_mac = (DEPTHWISE_INPUT_GRAD_S, DEPTHWISE_WEIGHT_GRAD_S) if backward \
        else (DEPTHWISE_OUTPUT_S, DEPTHWISE_TAP_S)
    return (math.prod(shape) * per_element + macs * per_mac) / multiprocessors


def row_reduction_s(shape, read_bytes: float, multiprocessors: Optional[int]) -> Optional[float]:
    """Seconds of ATen's reduction over the innermost dimensions writing a ``shape`` output
    (one element a row) from ``read_bytes`` of input on an NVIDIA GPU of ``multiprocessors``
    SMs; None where the SMs are unknown."""
    if not multiprocessors or not shape:
        return None
    return (math.prod(shape) * REDUCTION_ROW_S + read_bytes * REDUCTION_BYTE_S) \
        / multiprocessors


def elementwise_loop_s(kind: str, shape, moved_bytes: float,
                       multiprocessors: Optional[int]) -> Optional[float]:
    """Seconds of ATen's elementwise loop of ``kind`` (a key of LOOP_ELEMENT_S) writing a
    ``shape`` output and moving ``moved_bytes`` (read and written) on an NVIDIA GPU of
    ``multiprocessors`` SMs; None where the SMs are unknown."""
    if not multiprocessors or not shape:
        return None
    return (math.prod(shape) * LOOP_ELEMENT_S[kind] + moved_bytes * LOOP_BYTE_S) \
        / multiprocessors


def transpose_s(elements: float, multiprocessors: Optional[int]) -> Optional[float]:
    """Seconds below which cuDNN's layout kernels move ``elements`` (each read and written
    once) on an NVIDIA GPU of ``multiprocessors`` SMs; None where the SMs are unknown."""
    if not multiprocessors:
        return None
    return elements * TRANSPOSE_ELEMENT_S / multiprocessors


def column_reduction_blocks(rows: int, columns: int, multiprocessors: int,
                            resident_threads: int) -> tuple[int, int]:
    """(blocks a column's rows are split across, the block's height: how many of its threads
    read their partial sums side by side) of ATen's reduce kernel summing ``rows`` rows of
    ``columns`` contiguous outputs (setReduceConfig,
    Reduce.cuh, "vectorize along output"): threads take up to 4 outputs each across a
    block's width, its height splits the rows, and where a thread would still sum 256
    rows or more the rows are split across blocks too -- enough to fill the GPU, each
    thread keeping at least 16. (1, 0) where no block is split."""
    vector = next(v for v in (4, 2, 1) if columns % v == 0)
    most = 512 // vector
    across = _last_pow2(columns // vector) if columns // vector < most else most
    down = _last_pow2(rows) if rows < most else most
    width = min(across, 32)
    height = min(down, most // width)
    width = min(across, most // height)
    if rows < height * 16 and rows < 256:
        return 1, 0  # the block's height takes more outputs: no split of the rows
    per_thread = math.ceil(rows / height)
    grid = math.ceil(columns // vector / width)
    target = multiprocessors * (resident_threads // (width * height))
    if per_thread < 256 or grid > target:
        return 1, 0
    split = max(min(math.ceil(target / grid), math.ceil(per_thread / 16)),
                math.ceil(per_thread / 256))
    return (split, height) if split > 1 else (1, 0)


def _last_pow2(n: int) -> int:
    """Reduce.cuh's last_pow2: the largest power of two at most n (1 at least)."""
    return 1 << max(int(n).bit_length() - 1, 0)


def global_reduce_s(rows: int, columns: int, multiprocessors: Optional[int],
                    compute_capability: Optional[tuple]) -> float:
    """Seconds the reduce kernel spends combining a column's blocks (column_reduction_blocks)
    after its rows are read: the last block to finish reads every other block's partial
    sums, ceil(blocks / height) dependent round trips a thread, behind a fixed cost (the
    semaphores' cudaMemsetAsync and the blocks' hand-off); 0 where no block is split or
    the GPU's SMs or resident threads are unknown."""
    limits = RESIDENT.get(tuple(compute_capability or ()))
    if not multiprocessors or limits is None or rows < 2 or columns < 1:
        return 0.0
    blocks, height = column_reduction_blocks(rows, columns, multiprocessors, limits[0])
    if blocks < 2:
        return 0.0
    return math.ceil(blocks / height) * PARTIAL_TRIP_S + GLOBAL_REDUCE_FIXED_S


def sm_clock_hz(fp32_peak: Optional[float], multiprocessors: Optional[int],
                compute_capability: Optional[tuple]) -> Optional[float]:
    """An NVIDIA GPU's SM boost clock (Hz) from its datasheet FP32 peak (FLOP/s, the CUDA
    cores' -- not a measured GEMM rate), SMs and compute capability (FP32_LANES); None
    where any is unknown."""
    lanes = FP32_LANES.get(tuple(compute_capability or ()))
    if not fp32_peak or not multiprocessors or lanes is None:
        return None
    return fp32_peak / (2 * lanes * multiprocessors)


def interpolation_loop_s(shape, multiprocessors: Optional[int],
                         compute_capability: Optional[tuple],
                         clock_hz: Optional[float] = None) -> Optional[float]:
    """Seconds of a linear or cubic interpolation's NCHW forward kernel writing a ``shape``
    (N, C, *positions) output on an NVIDIA GPU whose SMs run at ``clock_hz`` (None: the
    reference boards'); None where the GPU's SMs or resident limits are unknown."""
    limits = RESIDENT.get(tuple(compute_capability or ()))
    if not multiprocessors or limits is None or len(shape) < 3 or 0 in shape:
        return None
    planes, positions = shape[0] * shape[1], math.prod(shape[2:])
    blocks = math.ceil(positions / INTERPOLATION_BLOCK)
    resident = max(1, min(limits[1], limits[0] // INTERPOLATION_BLOCK))
    waves = math.ceil(blocks / (multiprocessors * resident))
    warps = math.ceil(min(positions, INTERPOLATION_BLOCK) / 32) \
        * min(resident, math.ceil(blocks / multiprocessors))
    cycles = max(INTERPOLATION_TRIP_CYCLES, warps * INTERPOLATION_WARP_CYCLES)
    return waves * planes * cycles / (clock_hz or REFERENCE_CLOCK_HZ)


def bound_s(kind: str, shape, multiprocessors: Optional[int],
            compute_capability: Optional[tuple], macs: float = 0.0,
            clock_hz: Optional[float] = None, read_bytes: float = 0.0,
            moved_bytes: float = 0.0) -> Optional[float]:
    """Seconds below which an ATen CUDA kernel of ``kind`` (op_classes.LAUNCH_KINDS) over a
    ``shape`` output (making ``macs`` multiply-adds, for a convolution; reading
    ``read_bytes``, for a reduction; moving ``moved_bytes``, for an elementwise loop) cannot
    run on a GPU whose SMs run at ``clock_hz`` (None: the reference boards' clock); None
    where the GPU's facts are unknown. A CLOCKED_KINDS kernel takes its constants in SM
    cycles."""
    if kind == "interpolation_loop":  # in cycles, at this GPU's clock
        return interpolation_loop_s(tuple(shape or ()), multiprocessors, compute_capability,
                                    clock_hz)
    seconds = _reference_bound_s(kind, tuple(shape or ()), multiprocessors,
                                 compute_capability, macs, read_bytes, moved_bytes)
    if seconds is None or not clock_hz or kind not in CLOCKED_KINDS:
        return seconds
    return seconds * REFERENCE_CLOCK_HZ / clock_hz


def _reference_bound_s(kind: str, shape: tuple, multiprocessors: Optional[int],
                       compute_capability: Optional[tuple], macs: float,
                       read_bytes: float, moved_bytes: float) -> Optional[float]:
    """bound_s at the reference boards' clock. A training batch norm is its statistics and
    then its transform; a backward's bound is its two sums alone, its elementwise pass being
    another launch than the forward's transform (at 7 x 7 planes the transform's bound
    exceeds the whole measured backward)."""
    if kind in ("dw_conv", "dw_conv_backward"):
        return depthwise_conv_s(shape, macs, multiprocessors, kind == "dw_conv_backward")
    if kind == "row_reduction":
        return row_reduction_s(shape, read_bytes, multiprocessors)
    if kind in LOOP_ELEMENT_S:
        return elementwise_loop_s(kind, shape, moved_bytes, multiprocessors)
    if kind == "transpose":  # its "shape": the elements it moves
        return transpose_s(math.prod(shape), multiprocessors)
    transform = batch_norm_transform_s(shape, multiprocessors, compute_capability)
    if kind == "bn_eval":
        return transform
    if kind == "bn_train":
        sums = batch_norm_reduction_s(shape, multiprocessors, compute_capability,
                                      STATISTICS_ITERATION_S)
        return sums + transform if sums is not None and transform is not None else None
    if kind == "bn_backward":
        return batch_norm_reduction_s(shape, multiprocessors, compute_capability,
                                      BACKWARD_REDUCTION_ITERATION_S)
    if kind == "pool":
        return pool_s(shape, multiprocessors)
    if kind == "adaptive_pool":
        return adaptive_pool_s(shape, multiprocessors)
    if kind == "layer_norm":
        return layer_norm_s(shape, multiprocessors)
    raise ValueError(f"no launch bound for {kind!r}")
