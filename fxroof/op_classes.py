"""Which op class of the calibrated time model prices a node record.

A node record (AnnotatedGraph.records, the study's cache) names its ATen op, its cost rule
with the rule's variant (op_costs names a depthwise convolution ``convolution[depthwise]``, a
training batch norm ``batch_norm[batch stats]``) and the cost rules' coarse ``op_class``
(matrix, memory, view, ...). The time model (fxroof.calibration) prices each record with the
parameters of a finer class -- a GEMM, an NCHW or a channels-last convolution, each kind of
convolution backward, a norm of inference or of training, a kernel Inductor generates --
which ``op_class_of`` picks; ``FALLBACK`` names the class a chip without parameters of its
own for a class uses instead. Also here: the shape facts the fits read from a record (a
GEMM's batch, m, n and k; a convolution's weight bytes).
"""
from __future__ import annotations

import math
import re
from typing import Optional

CLASSES = ("gemm", "conv", "elementwise", "norm", "softmax")
# Classes only a device's own probes measure (fxroof.probes), and the class a chip without
# them uses instead: channels-last convolutions (oneDNN runs them without the layout reorders
# an NCHW convolution pays on a CPU) and kernels Inductor generates (one call from its
# wrapper, no eager dispatch, a whole fused chain per pass over memory).
# Pooling and data movement (copies, concatenation, allocation) are probed on a CPU; the
# GPU kernel data has neither, so there they take the elementwise parameters.
# The backward kernels of convolutions and norms are classes of their own where a device
# measured them (chips measure --full times a training run node by node), since neither is
# the forward kernel run again: a convolution's backward also reduces the weight gradient
# over every output position, and a norm's backward (norm_bwd) or a training batch norm's
# forward (norm_train, which computes the batch statistics) makes a reduction pass before
# its elementwise one. Those two are apart too: on this project's CPU a batch norm's
# forward of training ran 8 GB/s of its counted bytes and its backward 29 (8 x 96 x 56 x
# 56: ATen's CPU kernel reads the input once for the mean, once for the variance and again
# to normalise), and one class priced mobilenet_v2's forwards at 0.42x.
# A depthwise convolution's backward is a class of its own (conv_bwd_dw), and one computing
# the weight gradient of a kernel wider than oneDNN's depthwise kernel takes
# (op_costs.conv.WIDE) one of two others, by the implementation ONEDNN_VERBOSE shows for it:
# NCHW, an im2col + GEMM convolution ("gemm:jit", conv_bwd_dw_wide, 1-9 GFLOP/s on this
# project's CPU); channels-last (ConvNeXt's, whose permutes leave its gradients so), the
# dense direct kernel ("jit:avx512_core", conv_bwd_dw_wide_cl, about 20). Priced with the
# dense backward's rates, mobilenet_v2's 3x3 ones at batch 8 came out 1.7x long, and
# mnasnet1_0's 5x5 ones 0.11x short.
# A reduction (op_costs.reduction's rules: sum, mean, amax, ...) is a class of its own,
# "reduce", where a device measured one: ATen runs a mean as several calls (sum, then a
# dtype-checking copy and an in-place divide), and inside a model each call dispatches cold.
# On this project's AMD CPU, timed node by node inside the calibration models, a global
# mean of 0.1-8 MB took 130-560 us where the elementwise class priced it 3.2x short, and
# 17 us when run alone in a loop -- so its rows come from the models' nodes, no probe. A
# chip measured before the class, and every GPU fit (NeuSight swept no reduction), prices
# it as elementwise.
# A max pooling's backward is a class of its own, "pool_scatter", where a device measured
# one: it adds each output gradient at its argmax into a zeroed input, one pass and no
# window, where a CPU's NCHW pooling forward (and an average pooling's backward) scans every
# window element in scalar code. On this project's AMD CPU resnet18's 3x3/2 max pool of
# 64 x 112 x 112 at batch 1 took 4.6 ms forward and 0.3-0.8 ms backward, about the same
# bytes (5.6 MB) both ways; one class for both fitted 0.07 of the copy bandwidth and priced
# the backward 6x its time, while average poolings' backwards ran as slowly as their
# forwards (0.3-0.6 GFLOP/s of window work). A chip measured before the class, and every
# GPU (whose poolings fxroof.launch_geometry bounds alike both ways), prices it as pool.
# A Bernoulli draw (RANDOM_OPS: dropout's mask) is a class of its own, "random", where a
# device measured one: a CPU draws each element from its generator one at a time, and on
# this project's AMD CPU bernoulli_ took 12-35 ns an element (10.6 ms for squeezenet1_0's
# 692,224 at batch 8), where the elementwise class priced it 0.12 ms. A chip measured before
# the class, and every GPU (whose draws are vectorised Philox, and NeuSight swept none),
# prices it as elementwise.
# An activation that evaluates a transcendental per element (MATH_OPS: GELU, SiLU, sigmoid,
# tanh, exp, log, erf, ... and the backwards that evaluate one again) is a class of its own,
# "math", where a device measured one: op_costs counts each transcendental as one FLOP (the
# convention), but a CPU's vectorised exp or erf is a polynomial of tens of instructions, so
# these ops run at a compute rate of their own, far below the plain arithmetic one. On this
# project's AMD CPU, timed node by node, convnext_tiny's GELUs at batch 1 took 3.5x what the
# elementwise class priced (448 us a node, 0.9 ns an element), efficientnet_b0's SiLUs 2x,
# where ReLUs of the same bytes were priced 1.3-2x long. A chip measured before the class,
# and every shipped GPU fit (a GPU's math is fast beside its bandwidth, and NeuSight swept
# none), prices them as elementwise.
# A matrix-vector product (an output of one row or one column: a classifier at batch 1, the
# input gradient of one) is a class of its own, gemv: BLAS runs it as a level-2 kernel that
# reads the matrix once, where a product of a few rows (a level-3 GEMM) packs it first. On
# this project's CPU a 151 MB weight streamed at 22 GB/s times one row and 7-11 GB/s times
# 4, 8 or 16 rows; one class for both fitted 0.34 of the bandwidth (11 GB/s) and priced
# alexnet's batch-1 classifier 1.8x long, its step 1.39x. A chip never probed for it (every
# shipped GPU fit: NeuSight swept no GEMV) prices it as a GEMM, untiled, and on a GPU at the
# chip's streaming rate (time_model._at_streaming_rate).
# A generated kernel that copies across a transpose (fxroof.compiled: an NCHW input made
# channels-last, a weight converted per call) is the "transpose" class, apart from the
# other generated kernels: Inductor's C++ transposes 2-D tiles in registers, with scalar
# loops on a side shorter than a tile, and on this project's CPU such kernels moved 11-50
# GB/s against 28-84 for plain copies of the same bytes. A chip measured before the class
# prices them as "fused", as fxroof did before.
# A convolution that a CPU runs with ATen's own kernels rather than oneDNN's (cpu_native: an
# FP32 dense one of one small image, op_costs.conv.CPU_NATIVE) is the "conv_native" class on
# a CPU: an im2col copy and a BLAS GEMM behind ATen's wrapper, with no layout reorder and
# none of oneDNN's fixed cost. On this project's AMD CPU, in mobilenet_v3_large at batch 1,
# such 1x1 convolutions took 21-120 us on a squeeze-and-excitation block's pooled maps and
# 127 us for 80 -> 184 channels of 14 x 14, where oneDNN's 1x1 convolution of 184 -> 80
# took 185 us (torch.profiler); fitted with oneDNN's, one class gave them its 150-160 us
# fixed cost and its reorders. Nor are they the GEMM class's products: filed with
# nn.Linear's, they raised its fixed cost from 13 to 126 us. A chip measured before the
# class prices them with the conv class's rates (less the reorders they do not make).
FALLBACK = {"conv_cl": "conv", "conv_native": "conv", "fused": "elementwise",
            "transpose": "fused", "gemv": "gemm",
            "pool": "elementwise", "pool_scatter": "pool", "reduce": "elementwise",
            "math": "elementwise", "random": "elementwise",
            "copy": "elementwise", "conv_bwd": "conv", "norm_train": "norm",
            "norm_bwd": "norm_train",
            "conv_bwd_dw": "conv_bwd", "conv_bwd_dw_wide": "conv_bwd_dw",
            "conv_bwd_dw_wide_cl": "conv_bwd_dw_wide"}
TRAINING_NORM_CLASSES = ("norm_train", "norm_bwd")
POOL_CLASSES = ("pool", "pool_scatter")
BACKWARD_CONV_CLASSES = ("conv_bwd", "conv_bwd_dw", "conv_bwd_dw_wide", "conv_bwd_dw_wide_cl")
CONV_CLASSES = ("conv", "conv_cl") + BACKWARD_CONV_CLASSES
MATRIX_CLASSES = ("gemm", "gemv", "conv_native") + CONV_CLASSES
# The matrix classes a GPU library cuts in output tiles run in waves over the SMs
# (calibration.utilization): not gemv, which cuBLAS runs as one pass over the matrix
TILED_CLASSES = ("gemm",) + CONV_CLASSES
MEASURED_CLASSES = CLASSES + tuple(FALLBACK)

_CONV_OPS = ("convolution", "convolution_backward", "cudnn_convolution", "_convolution",
             "mkldnn_convolution", "conv_depthwise2d", "_conv_depthwise2d",
             "slow_conv_transpose2d", "slow_conv_dilated2d")
# op_costs/norm.py names a training batch norm's kernel so: "batch_norm[batch stats]"
BATCH_STATS_VARIANT = "[batch stats]"
# op_costs/conv.py names a depthwise convolution (or its backward) so, and a backward that
# computes a wide kernel's weight gradient DEPTHWISE_VARIANT + WIDE_SUFFIX
DEPTHWISE_VARIANT = "[depthwise"
POINTWISE_VARIANT = "[pointwise"  # a dense 1x1 convolution, strided or not (op_costs.conv)
PLAIN_POINTWISE_VARIANT = "[pointwise]"  # ... of stride 1, unpadded (op_costs.conv.POINTWISE)
# cuDNN runs an NCHW 1x1 convolution of stride 1 (forward and backward) as a GEMM on the
# NCHW tensors themselves -- an image's positions are a matrix's columns already -- where an
# image has this many positions or more. On the workplace's H200 and H100 alike (cuDNN
# 9.19; benchmarks/measured/conv-layouts/, conv_kernels.py), over ResNet-50's six channel
# pairs in TF32 and BF16 at batch 32 and 256, the kernels ran with no layout change in 48
# of 48 forwards and 45 of 48 backwards at 28 x 28 and 56 x 56, against 15-16 and 10-11 of
# 24 at 14 x 14 and 7-8 and 5 of 24 at 7 x 7 (implicit GEMMs between NHWC transposes).
NCHW_GEMM_POSITIONS = 28 * 28
NARROW_VARIANT = "[narrow "  # "[narrow 3]": a dense one of 3 input channels (op_costs.conv)
GROUPED_VARIANT = "[grouped "  # "[grouped 8]": 8 output channels a group (op_costs.conv)
_GROUP_WIDTH = re.compile(re.escape(GROUPED_VARIANT) + r"(\d+)\]")
WIDE_SUFFIX = " wide]"
# ... and one a CPU runs with ATen's own im2col + GEMM kernels, not oneDNN's: "[cpu native]"
# after its kind (op_costs.conv.CPU_NATIVE)
CPU_NATIVE_VARIANT = "[cpu native]"
# fxroof.compiled names a kernel Inductor generates so, and one whose reads cannot be loaded
# as vectors (a stride-2 pool over an NCHW map) GENERATED_RULE + UNVECTORISED_VARIANT: its
# C++ runs one lane of the vector unit at a time
GENERATED_RULE = "inductor generated"
# ... and a library kernel it calls (a convolution, a product) EXTERN_RULE, with its op's rule
EXTERN_RULE = "inductor extern"
UNVECTORISED_VARIANT = "[unvectorised]"
# ... and one that reads an input across a transpose GENERATED_RULE + TRANSPOSING_VARIANT
TRANSPOSING_VARIANT = "[transposing]"
# op_costs/data_movement.py's rule for empty, empty_like, new_empty...: an allocation
ALLOCATION_RULE = "allocation"
REDUCTION_RULE = "reduction["  # op_costs/reduction.py's rules: reduction[sum], ...
# ATen ops (in place or not) that evaluate a transcendental function per element: the "math"
# class. Not sqrt and rsqrt (one instruction each), nor sigmoid's and tanh's backwards
# (arithmetic on the saved output), nor pow (ATen runs its common exponents as multiplies).
MATH_OPS = frozenset((
    "gelu", "gelu_backward", "silu", "silu_backward", "sigmoid", "tanh", "exp", "exp2",
    "expm1", "log", "log2", "log10", "log1p", "erf", "erfc", "erfinv", "softplus",
    "softplus_backward", "mish", "mish_backward", "elu", "celu", "selu", "glu",
    "glu_backward", "log_sigmoid_forward", "log_sigmoid_backward", "logaddexp", "logit",
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh",
    "atanh", "lgamma", "digamma"))
# ATen ops that draw random numbers per element, the "random" class: bernoulli_, dropout's
# mask, and CUDA's fused native_dropout (priced as elementwise there)
RANDOM_OPS = ("bernoulli", "native_dropout")
# In-place ATen ops that write a tensor without reading it: nothing they read brings the
# lines they write into the cache (in_place)
WRITE_ONLY_OPS = ("copy", "fill", "zero", "uniform", "normal", "random", "exponential",
                  "geometric", "cauchy", "log_normal") + RANDOM_OPS
_NORM_OPS = ("layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm")
_SOFTMAX_OPS = ("softmax", "log_softmax", "_softmax", "_log_softmax")


def in_place(record: dict) -> bool:
    """Whether a node is an elementwise op that writes its result over an operand it reads
    (relu_, hardtanh_, add_, silu_: the classes elementwise and math): the lines it writes
    are in the cache already, having just been read. An op writing a new tensor first
    fetches each line it writes (a CPU's write-allocate): half as much traffic again for a
    one-input op. On this project's AMD CPU relu_ of 2-160 MB ran 1.4-2.1x the rate of relu
    into a new tensor, both reading from memory, and inside models the fitted ratio is
    about 4, their operand being what the op before them just wrote (benchmarks/README.md,
    run 23)."""
    op = record["op"]
    return (op.endswith("_") and not op.startswith("_") and op.rstrip("_") not in WRITE_ONLY_OPS
            and op_class_of(record) in ("elementwise", "math"))


def allocation(record: dict) -> bool:
    """Whether a node only allocates its output (empty and its kin): no kernel runs."""
    return record.get("rule") == ALLOCATION_RULE


def empty_allocation(record: dict) -> bool:
    """Whether a node allocates nothing: an empty tensor of no elements -- a batch norm's
    reserve (``empty([0], uint8)``, one per layer, used by nothing), which the captured graph
    holds as a node of its own but ATen creates inside the batch norm's C++ call
    (``_batch_norm_impl_index``), with no dispatch from Python and no page to touch."""
    return allocation(record) and math.prod(record.get("shape") or (1,)) == 0


def running_statistics_norm(record: dict) -> bool:
    """Whether a node is a batch norm that applies running statistics (an eval-mode forward):
    no reduction, only x * scale + shift per channel."""
    return op_class_of(record) == "norm" and "batch_norm" in record["op"]


# The kinds of kernel fxroof.launch_geometry bounds, by what a node record is
LAUNCH_KINDS = ("bn_eval", "bn_train", "bn_backward", "pool", "adaptive_pool", "layer_norm",
                "dw_conv", "dw_conv_backward", "row_reduction", "strided_loop",
                "strided_casting_loop", "casting_loop", "interpolation_loop")
# The interpolations whose NCHW forward kernel puts a thread on each output position and
# loops it over every (image, channel) plane (fxroof.launch_geometry); the nearest modes
# and the backwards put a thread on every element, and the antialiased ones run other code
INTERPOLATION_LOOP_OPS = ("upsample_linear1d", "upsample_bilinear2d", "upsample_bicubic2d",
                          "upsample_trilinear3d")
# The adaptive poolings ATen runs a block per (image, channel) plane over NCHW tensors
# (fxroof.launch_geometry); one to a 1 x 1 output is a mean (adaptive_avg_pool2d's own
# shortcut), and the 3-d ones run other kernels
ADAPTIVE_POOL_OPS = ("_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
                     "adaptive_max_pool2d", "adaptive_max_pool2d_backward")
# The launch kind of an elementwise node by the loop its rule names (op_costs.pointwise's
# loop_variant: "pointwise[mul][strided]"): ATen's legacy or casting loops, whose time is
# the SM's per element, not the bytes (fxroof.launch_geometry)
ELEMENTWISE_LOOPS = {"[strided]": "strided_loop", "[strided casting]": "strided_casting_loop",
                     "[casting]": "casting_loop"}
# op_costs.norm's variant for the contiguous copies a layer norm makes of strided operands
_COPIES = re.compile(r"\[(\d+) cop(?:y|ies)\]$")
# The reductions ATen runs with its reduce kernel, a group of threads a row when the reduced
# dimensions are the innermost (mean shares sum's kernel: MeanOps, SharedReduceOps.h)
ROW_REDUCTION_OPS = ("mean", "sum")
# op_costs/reduction.py names a reduction over the outer dimensions so (its COLUMNS)
COLUMNS_VARIANT = "[columns]"
# Eager PyTorch runs an NCHW depthwise convolution of these dtypes with ATen's own
# conv_depthwise2d kernels (ConvBackend::CudaDepthwise2d); one of fp16 goes to cuDNN where
# its workload filter says so (ConvParams::use_cudnn_depthwise, Convolution.cpp)
ATEN_DEPTHWISE_DTYPES = ("float32", "bfloat16")
# ... and one of fp16 that cuDNN's filter refuses, which op_costs names so
# ("convolution[depthwise][cuda native]", op_costs.conv.CUDA_NATIVE: ConvMixer's 9 x 9,
# FastViT's 7 x 7, a MobileNet's strided or 16-channel ones)
CUDA_NATIVE_VARIANT = "[cuda native]"
# ... and the dtypes whose backward kernels were timed (fxroof.launch_geometry): a bf16
# backward keeps its class's time -- bounded as fp32's, the H200's and H100's bf16 training
# steps of the depthwise networks went from 0.90-1.08 to 1.03-1.16 of their measurements
ATEN_DEPTHWISE_BACKWARD_DTYPES = ("float32",)
# Eager PyTorch runs a CUDA batch norm of fp32 or fp16 input (fp32 weights, as under
# autocast) as cuDNN's (at::native::_select_batch_norm_backend, Normalization.cpp), one of
# bf16 input with ATen's own kernels -- the ones fxroof.launch_geometry models
CUDNN_BATCH_NORM_DTYPES = ("float32", "float16")


def launch_kind(record: dict) -> Optional[str]:
    """Which of LAUNCH_KINDS a node's ATen CUDA kernel is, None for any other node: an
    elementwise op whose rule names a legacy or casting loop (elementwise_loop), whatever
    its layout; then, of NCHW nodes only (a channels-last one runs other kernels), a batch
    norm in eval (running statistics) or training (batch statistics) or its backward, a
    fixed-window pooling or its backward (a thread per element), a 2-d adaptive pooling or
    its backward (a block per plane: ADAPTIVE_POOL_OPS), a layer norm's forward, a depthwise
    convolution that aten_depthwise_forward names or its backward of
    ATEN_DEPTHWISE_BACKWARD_DTYPES,
    a reduction over the innermost dimensions (row_reduction), a linear or cubic
    interpolation's forward (INTERPOLATION_LOOP_OPS)."""
    loop = elementwise_loop(record)
    if loop or record.get("layout") == "channels_last":
        return loop
    op_class, op = op_class_of(record), record["op"]
    if "batch_norm" in op:
        return {"norm": "bn_eval", "norm_train": "bn_train",
                "norm_bwd": "bn_backward"}.get(op_class)
    if op in ADAPTIVE_POOL_OPS:
        return "adaptive_pool"
    if op_class in POOL_CLASSES and "adaptive" not in op:
        return "pool"
    if op_class == "norm" and "layer_norm" in op:
        return "layer_norm"
    if row_reduction(record):
        return "row_reduction"
    if depthwise(record) and op == "convolution" and aten_depthwise_forward(record):
        return "dw_conv"
    if depthwise(record) and op == "convolution_backward" \
            and record["dtype"] in ATEN_DEPTHWISE_BACKWARD_DTYPES:
        return "dw_conv_backward"
    if op in INTERPOLATION_LOOP_OPS:
        return "interpolation_loop"
    return None


def contiguous_copies(record: dict) -> int:
    """How many strided operands a node copies to contiguous memory before its kernel, as
    its rule names them (op_costs.norm: a layer norm's ``[1 copy]``, ``[2 copies]``); 0 for
    any other node. Each is a tensor of the node's shape and dtype."""
    found = _COPIES.search(str(record.get("rule", "")))
    return int(found.group(1)) if found else 0


def elementwise_loop(record: dict) -> Optional[str]:
    """The ELEMENTWISE_LOOPS kind of an elementwise node -- or of a copy, which runs the same
    loops (op_costs.data_movement's ``copy[strided]``) -- whose rule names a loop other than
    the vectorised one, None for any other node."""
    rule = record.get("rule", "")
    if op_class_of(record) not in ("elementwise", "math", "copy") or not rule.endswith("]"):
        return None
    return ELEMENTWISE_LOOPS.get(rule[rule.rfind("["):])


def column_reduction(record: dict) -> Optional[tuple]:
    """(rows, columns) of a sum or mean over the outer dimensions, which its rule names
    (op_costs.reduction.COLUMNS: a bias gradient, a channels-last pool), None for any other
    node. The columns are its outputs; the rows come from its FLOPs (a sum's N - m, a
    mean's N: op_costs.reduction), whatever its dtypes."""
    if record["op"] not in ROW_REDUCTION_OPS or not record.get("rule", "").endswith(
            COLUMNS_VARIANT) or not record.get("shape"):
        return None
    columns = math.prod(record["shape"])
    inputs = record["flops"] + (columns if record["op"] == "sum" else 0)
    return (round(inputs / columns), columns) if columns else None


def layer_norm_weight_gradient(record: dict, itemsize: int) -> Optional[tuple]:
    """(rows, width) of a layer norm's backward that computes the weight or bias gradient
    beside the input gradient (of ``itemsize``-byte elements), None for any other node. The
    width is the last dimension's (a layer norm over more than the last dimension is priced
    as one over it); the weight gradient is there when the node writes more than its input
    gradient."""
    shape = record.get("shape") or ()
    if "layer_norm_backward" not in record["op"] or len(shape) < 2 \
            or record.get("bytes_written", 0) <= math.prod(shape) * itemsize:
        return None
    return math.prod(shape[:-1]), shape[-1]


def row_reduction(record: dict) -> bool:
    """Whether a node is a mean or sum over its input's innermost dimensions, each output a
    row of contiguous elements: one that keeps the reduced dimensions (``keepdim``) and so
    ends in a 1 -- an SE block's or a global pool's mean over H x W, an RMS norm's over the
    channels. Without keepdim the output cannot tell which dimensions were reduced, nor
    with a leading 1 (a bias gradient's sum over N, H and W is (1, C, 1, 1)): a batch of one
    is left out with those, where the bound is a fraction of a microsecond. Not one whose
    rule says it reduces over the outer dimensions (column_reduction): a mean over a
    channels-last input (ConvNeXt's global pool) runs the column configuration, 2-3x
    faster than this bound."""
    shape = record.get("shape") or ()
    rule = record.get("rule", "")
    return record["op"] in ROW_REDUCTION_OPS and rule.startswith(REDUCTION_RULE) \
        and not rule.endswith(COLUMNS_VARIANT) \
        and len(shape) >= 2 and shape[-1] == 1 and shape[0] > 1 \
        and record.get("flops", 0) > math.prod(shape)


def cudnn_batch_norm(record: dict) -> bool:
    """Whether eager PyTorch runs a node's CUDA batch norm as cuDNN's (CUDNN_BATCH_NORM_DTYPES),
    whose kernels are not the ones launch_kind names."""
    return "batch_norm" in record["op"] and record["dtype"] in CUDNN_BATCH_NORM_DTYPES


def cudnn_training_batch_norm(record: dict) -> bool:
    """Whether a node is a training batch norm or its backward that eager PyTorch runs as
    cuDNN's, whose kernels the launch bounds do not describe: the fp32 training profiles'
    nodes on ATen's kernels sum to 1.18-1.36x their eager steps on cuDNN's
    (fxroof.launch_geometry's docstring). cuDNN's eval kernel is not one of these: it took
    ATen's transform's time."""
    return cudnn_batch_norm(record) and op_class_of(record) != "norm"


def op_class_on(record: dict, device_class: str) -> Optional[str]:
    """The class that prices a node on a device of ``device_class`` ("cpu", "gpu", ...):
    op_class_of's, but on a GPU an eval batch norm is the elementwise kernel it runs --
    ATen's CUDA batch norm with running statistics copies the running mean, inverts the
    running variance (C elements each) and makes one pass, x * scale + shift
    (aten/src/ATen/native/cuda/Normalization.cu, batch_norm_cuda_out), where the norm
    class's kernels reduce each row first. A CPU keeps the norm class its probes fit, and
    prices a convolution it runs with ATen's kernels as conv_native (cpu_native)."""
    if device_class == "gpu" and running_statistics_norm(record):
        return "elementwise"
    if device_class == "cpu" and cpu_native(record):
        return "conv_native"
    return op_class_of(record)


def cpu_native(record: dict) -> bool:
    """Whether a node is a convolution (or its backward) that a CPU runs with ATen's own
    kernels, an im2col copy and a BLAS GEMM, rather than oneDNN's (op_costs.conv.CPU_NATIVE:
    an FP32 dense one of one small image)."""
    return CPU_NATIVE_VARIANT in record.get("rule", "")


def pointwise(record: dict) -> bool:
    """Whether a node is a dense 1x1 convolution or its backward, strided or not (its rule
    names POINTWISE_VARIANT, inside a compiled view's extern[...] too)."""
    return POINTWISE_VARIANT in record.get("rule", "")


def depthwise(record: dict) -> bool:
    """Whether a node is a depthwise convolution or its backward (one input channel a group)."""
    return DEPTHWISE_VARIANT in record.get("rule", "")


def depthwise_filter_area(record: dict) -> Optional[int]:
    """A depthwise convolution's filter area (9 x 9: 81), read off its count: its MACs are the
    output's elements times the filter's, one input channel a group (op_costs.conv); None for
    any other node, or a record without MACs."""
    shape, macs = record.get("shape"), record.get("macs")
    if record["op"] != "convolution" or not depthwise(record) or not shape or not macs:
        return None
    return macs // math.prod(shape)


def aten_depthwise_forward(record: dict) -> bool:
    """Whether an NCHW depthwise convolution's forward runs ATen's conv_depthwise2d kernel:
    one of ATEN_DEPTHWISE_DTYPES always, one of fp16 where cuDNN's filter refuses it
    (CUDA_NATIVE_VARIANT)."""
    return record["dtype"] in ATEN_DEPTHWISE_DTYPES or CUDA_NATIVE_VARIANT in record["rule"]


def cudnn_depthwise(record: dict) -> bool:
    """Whether a node is a channels-last depthwise convolution or its backward, which eager
    PyTorch hands to cuDNN whatever its dtype (ConvParams::use_cudnn_depthwise,
    aten/src/ATen/native/Convolution.cpp: "always use cudnn_depthwise for channels_last
    format"); an NCHW one of ATEN_DEPTHWISE_DTYPES runs ATen's own conv_depthwise2d
    kernels (launch_kind)."""
    return depthwise(record) and record["op"] in ("convolution", "convolution_backward") \
        and record.get("layout") == "channels_last"


def cudnn_bias_add(record: dict) -> bool:
    """Whether a node is a forward convolution with a bias that eager PyTorch runs with
    cuDNN, which takes none: ATen adds it afterwards in a kernel of its own (``output.add_(
    reshape_bias(...))`` in _convolution, aten/src/ATen/native/Convolution.cpp; "cuDNN
    convolutions does not handle bias", ConvShared.cpp), a broadcast add over the whole
    output -- ATen's strided loop. ATen's own NCHW depthwise kernel (launch_kind "dw_conv")
    adds its bias itself. The bias is read off the rule's count: one FLOP an output element
    beyond 2 x MACs (op_costs.conv); a record without MACs tells nothing."""
    shape, macs = record.get("shape"), record.get("macs")
    if record["op"] not in ("convolution", "_convolution") or not shape or macs is None \
            or launch_kind(record) == "dw_conv":
        return False
    return record["flops"] - 2 * macs >= math.prod(shape)


def weight_gradient_only(record: dict) -> bool:
    """Whether a node is a convolution backward that computes no input gradient -- a
    network's first layer, whose input needs none: its first output is None, so its record
    has no shape (fxroof.graph)."""
    return record["op"] == "convolution_backward" and not record.get("shape")


def bias_gradient_elements(record: dict) -> int:
    """The output-gradient elements a convolution backward sums into its bias gradient, 0 for
    any other node: on a GPU ATen computes that gradient outside cuDNN's (and its own
    depthwise) kernels, ``grad_output.sum({0, 2, 3})`` (convolution_backward,
    Convolution.cpp: "Calculate bias gradients outside of the backend for those that don't
    support it") -- one more read of the output gradient. Read off the rule's count: one
    FLOP an output-gradient element beyond 2 x MACs (op_costs.conv)."""
    macs = record.get("macs")
    if record["op"] != "convolution_backward" or macs is None:
        return 0
    return max(int(record["flops"] - 2 * macs), 0)


def nchw_gemm(record: dict) -> bool:
    """Whether a node is an NCHW 2-D convolution (or its backward) that cuDNN runs as a GEMM
    on its NCHW tensors, with no layout change (NCHW_GEMM_POSITIONS): a dense 1x1 one of
    stride 1 whose images have at least that many positions. Its shape is the output's
    (a backward's, the input gradient's: a stride-1 1x1 convolution keeps the size)."""
    shape = record.get("shape") or ()
    return PLAIN_POINTWISE_VARIANT in record.get("rule", "") and len(shape) == 4 \
        and record.get("layout") != "channels_last" \
        and shape[2] * shape[3] >= NCHW_GEMM_POSITIONS


def narrow(record: dict) -> bool:
    """Whether a node is a dense convolution (or its backward) of fewer input channels than
    a tensor core reduces over at once (op_costs.conv.NARROW)."""
    return NARROW_VARIANT in record.get("rule", "")


def wide_weight_gradient(record: dict) -> bool:
    """Whether a node is a depthwise backward computing a kernel's weight gradient that
    oneDNN's direct depthwise kernel cannot (op_costs.conv.WIDE)."""
    return record.get("rule", "").endswith(DEPTHWISE_VARIANT + WIDE_SUFFIX)


def lane_padding(record: dict, lanes: float) -> float:
    """How many times its FLOPs a grouped convolution takes on a vector unit of ``lanes``
    fp32 lanes (1 where unknown or not one): oneDNN's direct kernel computes a group's output
    channels a whole vector at a time, so a group of c channels fills c of the lanes of
    ceil(c / lanes) vectors. Timed on this project's AVX-512 CPU, a channels-last 3x3
    convolution of 192 channels (batch 8, 28 x 28) took 0.82, 0.80 and 0.83 ms at 4, 8 and
    16 channels a group, whose FLOPs differ 4x (benchmarks/README.md, bench_grouped_conv)."""
    channels = group_width(record)
    if not channels or lanes < 2:
        return 1.0
    return math.ceil(channels / lanes) * lanes / channels


def group_width(record: dict) -> Optional[int]:
    """The channels a group of a grouped convolution's output (its rule's GROUPED_VARIANT:
    the forward's output channels, the backward's input-gradient channels), None for any
    other node (a saved annotation's rule may say anything: None where it names no count)."""
    found = _GROUP_WIDTH.search(str(record.get("rule", "")))
    channels = int(found.group(1)) if found else 0
    return channels if channels >= 1 else None


def matrix_vector(record: dict) -> bool:
    """Whether a matrix node's output is a vector -- one row or one column, as (1, n),
    (m, 1) or (n,) -- so it is a matrix-vector product (False where it records no shape)."""
    shape = record.get("shape")
    if not shape:
        return False
    return len(shape) == 1 or math.prod(shape[:-1]) == 1 or shape[-1] == 1


def generated(record: dict) -> bool:
    """Whether a node is a kernel Inductor generates (of the compiled view), of any class."""
    return record.get("rule", "").startswith(GENERATED_RULE)


def compiled_kernel(record: dict) -> bool:
    """Whether a node is a kernel of the compiled view (generated or extern): one launch from
    Inductor's wrapper, not an eager op autograd records."""
    return record.get("rule", "").startswith((GENERATED_RULE, EXTERN_RULE))


def unvectorised(record: dict) -> bool:
    """Whether a node is a generated kernel that runs scalar code (fxroof.compiled)."""
    return record.get("rule", "") == GENERATED_RULE + UNVECTORISED_VARIANT


def op_class_of(record: dict) -> Optional[str]:
    """The calibration class of a node record, or None for views (no kernel)."""
    if record["op_class"] == "view":
        return None
    op = record["op"]
    if generated(record):
        return "transpose" if record["rule"].endswith(TRANSPOSING_VARIANT) else "fused"
    if record["op_class"] == "matrix":
        if op.startswith(_CONV_OPS):
            if "_backward" in op:
                if wide_weight_gradient(record):
                    channels_last = record.get("layout") == "channels_last"
                    return "conv_bwd_dw_wide_cl" if channels_last else "conv_bwd_dw_wide"
                return "conv_bwd_dw" if depthwise(record) else "conv_bwd"
            return "conv_cl" if record.get("layout") == "channels_last" else "conv"
        return "gemv" if matrix_vector(record) else "gemm"
    if any(name in op for name in _SOFTMAX_OPS):
        return "softmax"
    if any(name in op for name in _NORM_OPS):
        if "_backward" in op:
            return "norm_bwd"
        return "norm_train" if record.get("rule", "").endswith(BATCH_STATS_VARIANT) \
            else "norm"
    if "pool" in op:
        return "pool_scatter" if "max_pool" in op and "_backward" in op else "pool"
    if record["op_class"] == "memory":
        return "copy"
    if record.get("rule", "").startswith(REDUCTION_RULE):
        return "reduce"
    if op.rstrip("_") in RANDOM_OPS:
        return "random"
    if op.rstrip("_") in MATH_OPS:
        return "math"
    return "elementwise"


# What the time model reads of a node record (op_class_of, fresh_bytes, layout_bytes,
# saved_bytes, gemm_dims and the roof): a record kept for later prediction (the study's
# cache) must keep these, or its depthwise convolutions lose their reduction length, its
# large outputs their page faults, its saved activations their trips to memory and its
# training batch norms their class.
RECORD_FIELDS = ("op", "op_class", "rule", "dtype", "flops", "bytes", "bytes_read",
                 "bytes_written", "shape", "layout", "faulted_bytes", "saved_bytes_read",
                 "saved_bytes_written")
# ... of which a record written before them may lack, read as 0 (hidden_bytes.saved_bytes):
# the GPU profiles kept in benchmarks/measured, where they would change nothing (a GPU's
# classes have no cache for them to bypass)
DEFAULTED_RECORD_FIELDS = ("saved_bytes_read", "saved_bytes_written")


def conv_weight_bytes(record: dict) -> int:
    """Bytes of a convolution's weights, from its FLOPs and output: F = 2 x positions x
    C_out x (C_in / groups) x kernel area, so the weights hold F / (2 x positions) elements
    (N x H x W output positions), each the size of an output element (bytes_written over
    the output's elements). 0 where the record has no output shape."""
    shape = record.get("shape")
    if not shape or len(shape) < 3:
        return 0
    positions = math.prod(shape[:1] + shape[2:])
    element = record.get("bytes_written", 0) / (positions * shape[1])
    return round(record["flops"] / (2 * positions) * element)


def gemm_dims(record: dict) -> Optional[tuple]:
    """(batch, m, n, k) of a GEMM-like node: m x n from its output shape -- (..., m, n) for
    matmuls, (N, C, H, W) as the implicit GEMM (N H W) x C for convolutions -- and the
    reduction length k from its FLOPs (F = 2 batch m n k); None when the node records no
    output shape (a convolution backward that computes only the weight gradient)."""
    shape = record.get("shape")
    if not shape:
        return None
    if op_class_of(record) in CONV_CLASSES and len(shape) >= 3:
        batch, m, n = 1, math.prod(shape[:1] + shape[2:]), shape[1]
    else:
        m, n = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[-1])
        batch = math.prod(shape[:-2]) if len(shape) > 2 else 1
    k = max(record["flops"] / max(2 * batch * m * n, 1), 1.0)
    return batch, m, n, k


def reduction_length(record: dict) -> float:
    """k of a GEMM-like node (gemm_dims), inf where it is unknown or the node is not one."""
    dims = gemm_dims(record) if op_class_of(record) in MATRIX_CLASSES else None
    return float(dims[3]) if dims else math.inf
