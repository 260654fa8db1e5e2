"""Kernels a node's ATen op runs on an NVIDIA GPU that its counted FLOPs and bytes do not
show, each priced in seconds on top of the node's class time (fxroof.time_model adds them):
cuDNN's NHWC transposes around an NCHW tensor-core convolution (transpose_s), the bias add
after a cuDNN convolution and a convolution backward's bias-gradient sum (bias_add_s,
bias_gradient_s), the reduce kernel's combining of its blocks (global_reduce_s), a layer
norm backward's weight-gradient kernel (layer_norm_weight_gradient_s), the contiguous copies
of strided operands (contiguous_copy_s); and the bounds below which a kernel cannot run
whatever its bytes: its launch geometry (launch_bound_s) and a tensor-core GEMM's unaligned
rows (unaligned_gemm_s).
"""
from __future__ import annotations

import math

from fxroof import hidden_bytes, launch_geometry, op_classes
from fxroof.chip_params import multiprocessors, nvidia_gpu, params as class_params, sm_clock_hz
from fxroof.chips import Chip
from fxroof.roofline import searched_result_layout
from fxroof.units import itemsize

# A 1x1 convolution that cuDNN runs as a GEMM on its NCHW tensors (op_classes.nchw_gemm)
# reads an image's H x W positions as a matrix's rows. Tensor-core GEMM kernels load their
# operands in 128-bit vectors, so a row stride that is not a multiple of 16 bytes rules them
# out ("most kernels targeting Tensor Cores require 128b aligned memory accesses ... a
# documented requirement in cublas": NVIDIA/cutlass issue #75): Inception's 35 x 35 and 73 x
# 73 planes in any dtype, SqueezeNet's 54 x 54 in 16-bit. Timed (the H100's and H200's bf16
# profiles), Inception's 14 such convolutions took what cuDNN's transposes of their
# operands and results take at its element rate, 0.90-1.09x on both boards alike -- not the
# GEMM's time (2.1-3.6x it) nor transposes and GEMM in turn (0.63-0.75x of that): the
# elements go through the SM one at a time, as in those transposes.
ALIGNMENT_BYTES = 16


def launch_bound_s(record: dict, chip: Chip) -> float:
    """Seconds below which a node's kernel cannot run on this GPU whatever its bytes
    (fxroof.launch_geometry): an ATen CUDA kernel of op_classes.launch_kind's on an NVIDIA
    GPU whose SMs (and, for a batch norm, compute capability) are known; 0 for anything
    else, and for a training batch norm that eager PyTorch hands to cuDNN, whose kernels the
    bounds do not describe (op_classes.cudnn_training_batch_norm: those nodes keep their
    class's time). cuDNN's eval batch norm is held to ATen's transform bound: in one
    process, the H200's fp32 EfficientNet-B0 eager step (cuDNN's) took 1.06x the sum of its
    nodes timed with ATen's kernel (launch_geometry's docstring)."""
    kind = op_classes.launch_kind(record)
    if not nvidia_gpu(chip) or kind is None or op_classes.cudnn_training_batch_norm(record):
        return 0.0
    units = multiprocessors(chip)
    seconds = launch_geometry.bound_s(kind, record.get("shape"), units,
                                      chip.compute_capability, record.get("macs") or 0.0,
                                      sm_clock_hz(chip, units),
                                      record.get("bytes_read") or 0.0,
                                      record.get("bytes") or 0.0)
    return seconds or 0.0


def global_reduce_s(record: dict, chip: Chip) -> float:
    """Seconds an NVIDIA GPU's reduce kernel spends combining blocks after a reduction over
    the outer dimensions has read its rows (launch_geometry.global_reduce_s), on top of the
    class's time for the bytes; 0 for any other node or device."""
    shape = op_classes.column_reduction(record)
    if not nvidia_gpu(chip) or shape is None:
        return 0.0
    return launch_geometry.global_reduce_s(*shape, multiprocessors(chip),
                                           chip.compute_capability)


def layer_norm_weight_gradient_s(record: dict, chip: Chip) -> float:
    """Seconds of an NVIDIA GPU's layer-norm weight-gradient kernel
    (launch_geometry.layer_norm_weight_gradient_s), on top of the class's time for the
    input gradient's pass; 0 for any other node or device."""
    found = op_classes.layer_norm_weight_gradient(record, itemsize(record.get("dtype")))
    if not nvidia_gpu(chip) or found is None:
        return 0.0
    return launch_geometry.layer_norm_weight_gradient_s(*found, multiprocessors(chip),
                                                        chip.compute_capability)


def transpose_s(record: dict, chip: Chip, key: str) -> float:
    """Seconds of the NHWC transposes around a convolution on an NVIDIA GPU's tensor cores
    (a matrix-engine roof: TF32, FP16, BF16) with NCHW tensors (hidden_bytes.transpose_bytes:
    of its operands alone where the search spares the result's, searched_result_layout),
    each pass streaming at the chip's copy rate -- or, where its SMs are known and that is
    slower, at cuDNN's rate an element (launch_geometry.transpose_s: a 16-bit tensor's)."""
    if not nvidia_gpu(chip) or chip.units.get(key) != "matrix":
        return 0.0
    moved = hidden_bytes.transpose_bytes(record, searched=searched_result_layout(chip))
    copy = class_params(chip, "copy") if moved else None
    if not copy:
        return 0.0
    units = multiprocessors(chip)
    elements = moved / (2 * itemsize(record.get("dtype")))  # each read and written
    bound = launch_geometry.bound_s("transpose", (elements,), units, chip.compute_capability,
                                    clock_hz=sm_clock_hz(chip, units))
    return max(moved / (chip.bandwidth * copy.memory), bound or 0.0)


def unaligned_rows(record: dict) -> bool:
    """Whether a node is a 1x1 convolution (or its backward) run as a GEMM on NCHW tensors
    (op_classes.nchw_gemm) whose image rows, H x W elements, are not a multiple of
    ALIGNMENT_BYTES."""
    if not op_classes.nchw_gemm(record):
        return False
    height, width = record["shape"][2:]
    return height * width * itemsize(record.get("dtype")) % ALIGNMENT_BYTES != 0


def unaligned_gemm_s(record: dict, chip: Chip, key: str) -> float:
    """Seconds below which an NVIDIA GPU's tensor cores (a matrix-engine roof) run a 1x1
    NCHW convolution with unaligned rows (unaligned_rows): every element it reads and
    writes -- a backward's output gradient twice, once for each of its GEMMs -- at the rate
    cuDNN's transposes move elements (launch_geometry.transpose_s; ALIGNMENT_BYTES's
    comment); 0 for any other node, and where the SMs are unknown."""
    if not nvidia_gpu(chip) or chip.units.get(key) != "matrix" or not unaligned_rows(record):
        return 0.0
    elements = (record["bytes"] + hidden_bytes.reread_gradient_bytes(record)) \
        / itemsize(record.get("dtype"))
    units = multiprocessors(chip)
    return launch_geometry.bound_s("transpose", (elements,), units, chip.compute_capability,
                                   clock_hz=sm_clock_hz(chip, units)) or 0.0


def bias_add_s(record: dict, chip: Chip) -> float:
    """Seconds of the bias add ATen runs after a cuDNN convolution on an NVIDIA GPU
    (op_classes.cudnn_bias_add): the output read and written once more by ATen's strided
    loop, the longer of that loop's launch-geometry bound (where the SMs are known) and the
    bytes at the elementwise class's streaming rate; 0 for any other node or device."""
    if not nvidia_gpu(chip) or not op_classes.cudnn_bias_add(record):
        return 0.0
    moved = 2 * math.prod(record["shape"]) * itemsize(record.get("dtype"))
    units = multiprocessors(chip)
    bound = launch_geometry.bound_s("strided_loop", record["shape"], units,
                                    chip.compute_capability, clock_hz=sm_clock_hz(chip, units),
                                    moved_bytes=moved)
    params = class_params(chip, "elementwise")
    return max(bound or 0.0, moved / (chip.bandwidth * params.memory) if params else 0.0)


def copied_bytes(record: dict, chip: Chip) -> int:
    """Bytes of a node's contiguous copies of strided operands (op_classes.
    contiguous_copies: each read and written once) that a GPU runs as copy kernels of their
    own, priced apart (contiguous_copy_s); 0 for any other node, and on a CPU, where the
    norm class's fitted rates already hold the copies of the nodes they were timed on."""
    if chip.cls != "gpu" or not record.get("shape"):
        return 0
    return 2 * op_classes.contiguous_copies(record) * math.prod(record["shape"]) \
        * itemsize(record.get("dtype"))


def contiguous_copy_s(record: dict, chip: Chip) -> float:
    """Seconds a GPU spends on a node's contiguous copies (copied_bytes), at its copy
    class's streaming rate: ATen's copy of a strided tensor is its own kernel, the norm's
    kernel then reads the copy (ViT's layer norms behind nn.MultiheadAttention's transposes
    took 1.9x the first one's time, whose input is contiguous: benchmarks/README.md)."""
    copied = copied_bytes(record, chip)
    copy = class_params(chip, "copy") if copied else None
    return copied / (chip.bandwidth * copy.memory) if copy else 0.0


def bias_gradient_s(record: dict, chip: Chip) -> float:
    """Seconds of the sum ATen runs for a convolution backward's bias gradient on an NVIDIA
    GPU (op_classes.bias_gradient_elements): the output gradient read once more, at the
    elementwise class's streaming rate; 0 for any other node or device."""
    elements = op_classes.bias_gradient_elements(record)
    params = class_params(chip, "elementwise") if elements and nvidia_gpu(chip) else None
    if not params:
        return 0.0
    return elements * itemsize(record.get("dtype")) / (chip.bandwidth * params.memory)