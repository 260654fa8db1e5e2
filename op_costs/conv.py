"""Convolutions, forward and backward, any rank, groups, dilation, stride, transposed.

Direct (dense) convolution, padding positions included, which is what every library kernel's
nominal work is and what torchvision's ``_ops`` counts:

* regular:    MACs = N * C_out * prod(out_spatial) * (C_in / groups) * prod(kernel)
              weight is (C_out, C_in/groups, *kernel), so this is out.numel * weight[1:].numel
* transposed: every input element scatters into (C_out / groups) * prod(kernel) outputs:
              MACs = N * C_in * prod(in_spatial) * (C_out / groups) * prod(kernel)
              weight is (C_in, C_out/groups, *kernel), so this is input.numel * weight[1:].numel
* bias:       one add per output element.

convolution_backward computes, as ``output_mask`` asks: grad_input (a transposed convolution of
grad_output with the weight: the same MACs as the forward), grad_weight (a correlation of input
and grad_output: the same MACs again) and grad_bias (a sum of grad_output: one add per element).
The groups factor enters through the weight's shape, so depthwise convs are never over-counted.
"""
from __future__ import annotations

import math

import torch

from op_costs.registry import MATRIX, Cost, TensorMeta, register

aten = torch.ops.aten


# A depthwise convolution (one input channel per group) is named so in the rule
# ("convolution[depthwise]"): its kernels are not the dense ones -- on a GPU they run on the
# CUDA cores, not the tensor cores (fxroof.roofline) -- though its count is the same formula.
DEPTHWISE = "depthwise"
# A depthwise backward that computes the weight gradient of a kernel wider than 3 columns
# ("convolution_backward[depthwise wide]") runs another kernel for it: oneDNN's direct
# depthwise weight-gradient kernel takes kernels up to 3 wide (`jcp.kw <= 3` in
# jit_uni_dw_conv_bwd_weights_kernel::init_conf), and a 5x5 or 7x7 one falls to its im2col +
# GEMM convolution (ONEDNN_VERBOSE: "gemm:jit", against "jit_dw" for 3x3), a GEMM per
# channel and image with one output row: its weight gradients ran 0.8-7.8 GFLOP/s (median
# about 3) on this project's CPU against 2-65 (median 16-18) for 3x3 ones, over two runs of
# benchmarks/bench_depthwise_backward.py (benchmarks/README.md, "Depthwise backward").
WIDE = "depthwise wide"
WIDEST_DIRECT_KERNEL = 3
# A dense 1x1 convolution ("convolution[pointwise]") is a matrix product, and on a CPU its
# weights are an O x I matrix that oneDNN transposes into its blocked layout on every call
# of a channels-last convolution (fxroof.hidden_bytes.layout_bytes): a transpose of rows
# I x 4 bytes apart, which ran 5-12 GB/s on this project's CPU where a 3x3 kernel's weights
# (rows of 9 I values) reordered at 18-50 GB/s, about its copy bandwidth
# (`torch.ops.mkldnn._reorder_convolution_weight` timed alone, benchmarks/README.md).
POINTWISE = "pointwise"
# A strided or padded one ("convolution[pointwise strided]": a ResNet's downsampling
# shortcut) is no plain matrix product over an NCHW image's positions: it gathers them first,
# and cuDNN runs it as an implicit GEMM, with NHWC transposes around an NCHW one, where it
# runs a stride-1 one as a GEMM on the NCHW tensors themselves (fxroof.op_classes.nchw_gemm)
POINTWISE_STRIDED = "pointwise strided"
# A grouped convolution that is not depthwise ("convolution[grouped 8]": 8 output channels
# a group, RegNet's and ResNeXt's; its backward names its input gradient's channels a group):
# a CPU's vector kernel computes a group's output channels a vector at a time, so groups
# narrower than a vector leave its lanes idle, and a GPU's grouped kernels give a group a
# whole tile's columns (fxroof.roofline).
GROUPED = "grouped"
# A dense convolution of fewer input channels than a tensor core's reduction step
# ("convolution[narrow 3]": an image's 3 channels, a CNN's stem or a ViT's patch embedding):
# NVIDIA asks for input channels in multiples of 8 (FP16) or 4 (TF32) for a convolution to
# run efficiently on tensor cores (Convolutional Layers User's Guide, "Channels In and
# Out"); PyTorch pads nothing, and on an H100 such convolutions ran at 20-26 TFLOP/s in
# bf16 and TF32 alike, a CUDA-core rate (fxroof.roofline prices them so).
NARROW = "narrow"
NARROWEST_TENSOR_CORE_CHANNELS = 8
# A convolution that PyTorch's CPU dispatch runs with ATen's own kernels -- an im2col copy
# (none for a plain 1x1) and a BLAS GEMM (_slow_conv2d_forward / _backward) -- rather than
# oneDNN's ("convolution[pointwise][cpu native]"): ConvParams::use_mkldnn
# (aten/src/ATen/native/Convolution.cpp) takes oneDNN for an FP32 convolution only if it is
# grouped, or its kernel is wider and taller than 3, or the batch holds more than one image,
# or the input more than 20,480 elements ("for some case, native is faster"). So at batch 1
# a squeeze-and-excitation block's 1x1 convolutions and a late stage's small maps run as a
# GEMM, without oneDNN's layout reorders or its fixed cost: on this project's CPU,
# mobilenet_v3_large's SE convolutions took 21-120 us each (torch.profiler), where the time
# model's fit of oneDNN's convolutions put 139-160 us on every call before its first FLOP
# (fxroof.op_classes' conv_native class prices them apart). A 1-D convolution is run as a
# 2-D one of height 1. (With one thread, 1x1 unstrided convolutions of fewer than 16
# images run natively too; a CPU target is taken to run several.)
CPU_NATIVE = "cpu native"
NATIVE_MAX_INPUT = 20480

# An fp16 depthwise convolution that eager PyTorch on CUDA runs with ATen's own
# conv_depthwise2d kernel, not cuDNN's ("convolution[depthwise][cuda native]"; fxroof.op_classes
# gives it ATen's launch bound). fp32 and bf16 NCHW ones always run ATen's; an fp16 one goes
# to cuDNN only through ConvParams::use_cudnn_depthwise (aten/src/ATen/native/Convolution.cpp:
# 32 or more input channels, no dilation, equal strides) and its workload filter,
# check_cudnn_depthwise_workload_with_filter (ConvUtils.h): a square 1x1, 3x3 or 5x5 filter
# over an input 7 or more wide; stride 1 always; stride 2 for one image, else a 3x3 or 5x5
# filter over 512 or more channels, or 256 or more at 28 or more wide (a 1x1 one: 16 images
# or fewer, 128 or more channels, 7 or less wide); a 1-d one of stride 1 whatever its filter.
# That is the filter this torch 2.14.1 build runs (its use_cudnn_depthwise compares against
# 511, 255, 27, 127, 16 and 7; PyTorch's newer decision trees, DepthwiseConvHeuristic.h, do
# not). A channels-last one goes to cuDNN whatever it is ("always use cudnn_depthwise for
# channels_last format").
CUDA_NATIVE = "cuda native"
CUDNN_MIN_CHANNELS = 32
CUDNN_FILTERS = (1, 3, 5)
CUDNN_MIN_WIDTH = 7


def conv_macs(x, weight, out, transposed: bool) -> int:
    per_element = math.prod(weight.shape[1:])
    return (x.numel if transposed else out.numel) * per_element


def _depthwise(weight, groups, transposed: bool, weight_gradient: bool = False):
    if transposed or groups == 1 or weight.shape[1] != 1:
        return _narrow(weight, groups, transposed)
    return WIDE if weight_gradient and weight.shape[-1] > WIDEST_DIRECT_KERNEL else DEPTHWISE


def _pointwise(weight, groups, transposed: bool, stride, padding):
    """"pointwise" for a dense 1x1 convolution of stride 1 and no padding, "pointwise
    strided" for another dense 1x1 one, else None."""
    if transposed or groups != 1 or any(k != 1 for k in weight.shape[2:]):
        return None
    plain = all(s == 1 for s in stride) and all(p == 0 for p in padding)
    return POINTWISE if plain else POINTWISE_STRIDED


def _narrow(weight, groups, transposed: bool):
    """"narrow C" for a dense convolution of C < 8 input channels, else None."""
    if transposed or groups != 1 or weight.shape[1] >= NARROWEST_TENSOR_CORE_CHANNELS:
        return None
    return f"{NARROW} {weight.shape[1]}"


def _grouped(channels: int, weight, groups, transposed: bool):
    """"grouped C" for a grouped convolution that is not depthwise, C being the channels a
    group of the node's output, else None."""
    if transposed or groups == 1 or weight.shape[1] == 1:
        return None
    return f"{GROUPED} {channels}"


def _kind(weight, groups, transposed: bool, stride, padding):
    """The forward convolution's variant: grouped (with its output channels per group),
    narrow (a dense one of few input channels), pointwise (dense 1x1; strided, or padded),
    depthwise or none."""
    return _grouped(weight.shape[0] // groups, weight, groups, transposed) \
        or _narrow(weight, groups, transposed) \
        or _pointwise(weight, groups, transposed, stride, padding) \
        or _depthwise(weight, groups, transposed)


def _cpu_native(x, weight, groups, transposed: bool):
    """CPU_NATIVE where a CPU runs this FP32 convolution with ATen's kernels, else None."""
    if transposed or groups != 1 or x.dtype != torch.float32 or len(x.shape) not in (3, 4):
        return None
    kernel = weight.shape[2:] if len(weight.shape) == 4 else (1, *weight.shape[2:])
    if all(k > 3 for k in kernel) or x.shape[0] > 1 or x.numel > NATIVE_MAX_INPUT:
        return None
    return CPU_NATIVE


def _cuda_native(x, weight, stride, dilation, groups, transposed: bool):
    """CUDA_NATIVE for an fp16 depthwise convolution cuDNN's filter refuses, else None."""
    if x.dtype != torch.float16 or _depthwise(weight, groups, transposed) != DEPTHWISE \
            or len(x.shape) not in (3, 4) or x.layout == "channels_last":
        return None
    if len(x.shape) == 3:  # PyTorch views a 1-d one as 2-d of height 1 (view1d_as_2d)
        x = TensorMeta.contiguous((x.shape[0], x.shape[1], 1, x.shape[2]), x.dtype)
        weight, stride, dilation = (*weight.shape[:2], 1, weight.shape[2]), (1, *stride), \
            (1, *dilation)
    else:
        weight = weight.shape
    return None if _cudnn_takes_depthwise(x.shape, weight[2:], stride, dilation) \
        else CUDA_NATIVE


def _cudnn_takes_depthwise(shape, kernel, stride, dilation) -> bool:
    """Whether use_cudnn_depthwise hands an fp16 NCHW depthwise convolution over an input of
    ``shape`` (N, C, H, W) to cuDNN (CUDA_NATIVE says how)."""
    n, channels, height, width = shape
    if channels < CUDNN_MIN_CHANNELS or any(d != 1 for d in dilation) \
            or (stride[0] != stride[1] and height != 1):
        return False
    if height == 1 and stride[1] == 1:
        return True
    if kernel[0] != kernel[1] or kernel[1] not in CUDNN_FILTERS or width < CUDNN_MIN_WIDTH:
        return False
    if stride[1] != 2:
        return stride[1] == 1
    if n == 1:
        return kernel[1] != 1 or width <= 28
    if kernel[1] == 1:
        return n <= 16 and channels >= 128 and width <= 7
    return channels >= 512 or (channels >= 256 and width >= 28)


def _variants(kind, *natives):
    """The rule's variant: the kind alone, or the kind and CPU_NATIVE or CUDA_NATIVE."""
    named = tuple(n for n in natives if n)
    return (kind, *named) if named else kind


@register(aten.convolution, aten._convolution, op_class=MATRIX)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding=None,
                groups=1, *_, out, **__):
    macs = conv_macs(x, weight, out, transposed)
    return Cost(flops=2 * macs + (out.numel if bias is not None else 0), macs=macs,
                variant=_variants(_kind(weight, groups, transposed, stride, padding),
                                  _cpu_native(x, weight, groups, transposed),
                                  _cuda_native(x, weight, stride, dilation, groups,
                                               transposed)))


@register(aten.convolution_backward, op_class=MATRIX)
def convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask, *, out, **_):
    want_input, want_weight, want_bias = output_mask
    # The forward's output has grad_out's shape; its input has x's shape.
    macs = conv_macs(x, weight, grad_out, transposed) * (int(want_input) + int(want_weight))
    flops = 2 * macs + (grad_out.numel if want_bias else 0)
    # grad_input needs (grad_out, weight); grad_weight needs (grad_out, x); grad_bias grad_out.
    read = grad_out.nbytes + (weight.nbytes if want_input else 0) + (x.nbytes if want_weight else 0)
    return Cost(flops=flops, macs=macs, bytes_read=read,
                variant=_variants(_grouped(weight.shape[1], weight, groups, transposed)
                                  or _depthwise(weight, groups, transposed, want_weight)
                                  or _pointwise(weight, groups, transposed, stride, padding),
                                  _cpu_native(x, weight, groups, transposed)))
