"""Bytes a kernel moves that its ATen node does not show.

The cost rules count what an op must read and write. Some kernels move more, in passes the
ATen graph has no node for, and the time model (fxroof.calibration) prices those passes at
rates of their own:

* on a CPU, the first touch of a freshly mapped output (``fresh_bytes``; what a whole step
  faults is replayed by fxroof.page_faults, which reads ``scratch_buffers``);
* on a CPU, oneDNN's layout reorders around a convolution (``layout_bytes``), of which a 1x1
  convolution's streamed weight transpose (``pointwise_weights``) and the reorder back of a
  result whose channels fill no whole block (``unblocked_result_bytes``) have rates of
  their own, and the im2col copy of one ATen runs itself (``im2col_bytes``), priced as
  such a pass;
* on a GPU, cuDNN's NHWC transposes around a tensor-core convolution of NCHW tensors
  (``transpose_bytes``), and a training norm's second pass over its input
  (``second_pass_bytes``).

Each function reads a node record (fxroof.op_classes) and returns bytes.
"""
from __future__ import annotations

import math

from fxroof.op_classes import (BACKWARD_CONV_CLASSES, PLAIN_POINTWISE_VARIANT,
                               TRAINING_NORM_CLASSES, conv_weight_bytes, cpu_native,
                               gemm_dims, nchw_gemm, op_class_of, pointwise)

# glibc's malloc serves an allocation this large or larger with a fresh mmap (the dynamic
# threshold stops rising at DEFAULT_MMAP_THRESHOLD_MAX, 4 * 1024 * 1024 * sizeof(long) on a
# 64-bit system: mallopt(3)), so the kernel faults in and zeroes its pages on first touch,
# call after call. Smaller ones reuse the heap once the threshold has adapted.
MMAP_THRESHOLD = 32 * 2 ** 20

def fresh_bytes(record: dict) -> int:
    """Bytes a node writes to a freshly mapped output (bytes): its output bytes when it
    allocates its output (not an in-place op, not a view) at or above MMAP_THRESHOLD."""
    if record["op_class"] == "view" or record["op"].endswith("_"):
        return 0
    written = record.get("bytes_written", 0)
    return written if written >= MMAP_THRESHOLD else 0


# The classes whose CPU kernels (oneDNN's) reorder an NCHW operand into a blocked layout and
# the result back, unless the tensors are channels-last already -- and a channels-last
# convolution, which still reorders its weights, and one run by ATen's kernels, which
# gathers its input into an im2col matrix (layout_bytes).
REORDERED_CLASSES = ("conv", "conv_cl", "conv_native") + BACKWARD_CONV_CLASSES
# oneDNN calls whose weights were reordered once, when Inductor froze the model
# (op_costs.onednn): channels-last convolutions with no per-call weight reorder
PREPACKED_OPS = ("_convolution_pointwise", "_convolution_transpose_pointwise")


def prepacked(record: dict) -> bool:
    return record["op"].startswith(PREPACKED_OPS)


# A 1x1 convolution's weights of this size or more do not fit one core's L2 cache (1-2 MiB
# on current x86 server cores; 1 MiB on this project's AMD EPYC), so their transpose streams.
# Smaller ones -- every conv_cl probe's, at most 512 KiB -- reorder in the cache at about the
# copy rate, like a 3x3 kernel's, and the class fit holds them so.
STREAMED_WEIGHT_BYTES = 2 ** 20


def pointwise_weights(record: dict) -> bool:
    """Whether a node's layout reorder is a streamed transpose of a 1x1 convolution's
    weights: a channels-last (conv_cl) dense 1x1 convolution, not prepacked, whose weights
    are STREAMED_WEIGHT_BYTES or more. Its O x I weight matrix is transposed into oneDNN's
    blocked layout on every call, which runs well below the copy bandwidth once it leaves
    the cache (op_costs.conv.POINTWISE), so a device may price it at a rate of its own
    (Params.pointwise_layout_rate)."""
    return (op_class_of(record) == "conv_cl" and pointwise(record)
            and not prepacked(record)  # in the compiled view: inductor extern[convolution[...]]
            and conv_weight_bytes(record) >= STREAMED_WEIGHT_BYTES)


def layout_bytes(record: dict) -> tuple[int, int]:
    """(bytes moved, bytes freshly mapped) by the layout reorders oneDNN makes around a
    convolution on a CPU (ONEDNN_VERBOSE shows a reorder per tensor per call), every pass
    reading and writing its tensor, the blocked copies being new buffers, so those at or
    above MMAP_THRESHOLD are faulted in afresh like a new output:
    * an NCHW convolution or convolution backward: each operand (input, weights, gradients)
      is reordered into oneDNN's blocked layout and each result back -- twice the op's bytes
      (fresh: the node's bytes read and written, each taken as one buffer). An
      approximation where an input has fewer channels than a block (a stem convolution on
      RGB reads it as it is);
    * a channels-last convolution: its activations are read and written as they are, but
      its weights are reordered from OHWI to a blocked layout on every call (Acdb32a, for
      2.4 MB of 256 x 256 x 3 x 3 weights, 0.5-1 ms on this project's CPU) -- twice its
      weight bytes (conv_weight_bytes), which at batch 1 are most of what it reads.
    * a convolution the CPU runs with ATen's own kernels, not oneDNN's (op_classes.
      cpu_native): no reorder, but its im2col matrix (im2col_bytes), a gather copy
      written and read again by the GEMM, is the same kind of pass -- twice its bytes;
      none for a 1x1 one of stride 1, unpadded, whose input is the GEMM's matrix as it is.
    (0, 0) for every other node, for a prepacked convolution of a frozen compiled view (its
    weights were reordered at compile time), and for a channels-last backward (its weight
    reorders are left to its fitted rates: no probe separates them)."""
    if cpu_native(record):  # ATen's im2col, written and read again by the GEMM
        columns = im2col_bytes(record)
        return 2 * columns, columns if columns >= MMAP_THRESHOLD else 0
    if op_class_of(record) == "conv_cl" and not prepacked(record):
        weights = conv_weight_bytes(record)
        return 2 * weights, weights if weights >= MMAP_THRESHOLD else 0
    if not reorders_operands(record):  # no reorder, or a channels-last backward's (not modelled)
        return 0, 0
    read, written = record.get("bytes_read", 0), record.get("bytes_written", 0)
    fresh = sum(b for b in (read, written) if b >= MMAP_THRESHOLD)
    return 2 * record["bytes"], fresh


def reorders_operands(record: dict) -> bool:
    """Whether oneDNN reorders every operand of a node into its blocked layout and every
    result back (layout_bytes: an NCHW convolution or convolution backward on a CPU)."""
    return (op_class_of(record) in set(REORDERED_CLASSES) - {"conv_cl"}
            and not cpu_native(record) and not prepacked(record)
            and record.get("layout") != "channels_last")


def unblocked_result_bytes(record: dict, block: int) -> int:
    """Of a node's layout_bytes, those of reordering its results back from a blocked layout
    of ``block`` channels (layout_block; 0: unknown) whose channel count fills no whole
    number of blocks: 2 x its bytes written (each read padded and written plain) where it
    reorders its operands and its result's channels (its shape's second dimension: a
    forward's output, a backward's input gradient, beside which its weight gradient, of the
    same uneven channels, goes back too) are not a multiple of ``block``; else 0. oneDNN
    runs that reorder with its generic kernel (``jit:uni`` in ONEDNN_VERBOSE; ``jit:blk``
    for whole blocks), which on this project's AVX-512 CPU moved 16-23 GB/s at every size
    from 0.2 to 23 MB, where whole blocks moved 45-140 GB/s in the cache and 36 GB/s from
    memory (58 against 64 channels; benchmarks/README.md, run 22): ShuffleNet's 58, 116
    and 232 channels, MNASNet's and MobileNetV3's 24, 40, 72 and 120."""
    shape = record.get("shape")
    if not block or not shape or len(shape) < 2 or not reorders_operands(record):
        return 0
    return 2 * record.get("bytes_written", 0) if shape[1] % block else 0


# Tensor cores compute convolutions in NHWC: given NCHW tensors, cuDNN transposes the
# activations and weights to NHWC before the kernel and the result back after it, each a
# pass over memory of its own (NVIDIA's Convolutional Layers User's Guide: choose NHWC "to
# avoid transposing input and output data"). Its FP32 kernels without tensor cores -- all
# that NeuSight's sweep ran -- read NCHW as it is. Where cuDNN searches its engines
# (torch.backends.cudnn.benchmark) it also finds tensor-core kernels that write their result
# in NCHW themselves -- sm80_xmma_fprop_implicit_gemm_..._nhwckrsc_nchw: NHWC input, KRSC
# filter, NCHW output -- and public traces of searched runs show them picked (ResNet-18 in
# TF32 on an RTX 4090 and on Blackwell, cuDNN 9) beside the nchwToNhwc transposes of their
# operands: only the operands are transposed then. On a datacenter H200 the search did not
# shorten the steps so (fxroof.roofline.searched_result_layout says where it applies).
TRANSPOSED_CLASSES = ("conv",) + BACKWARD_CONV_CLASSES


def transpose_bytes(record: dict, searched: bool = False) -> int:
    """Bytes the NHWC transposes of a GPU tensor-core convolution (or its backward) move
    when its tensors are NCHW: every operand read and written once more before the kernel
    and every result after it -- twice the node's bytes -- or, where cuDNN's engine search
    is on (``searched``), the operands alone: twice the bytes it reads -- a backward's
    output gradient counted twice, once for each of its kernels (reread_gradient_bytes).
    0 for a channels-last node, for a 1x1 one cuDNN runs as a GEMM on NCHW
    (op_classes.nchw_gemm) and for every other class. Whether the node runs on tensor
    cores is the roof's to say (fxroof.roofline)."""
    if op_class_of(record) not in TRANSPOSED_CLASSES or record.get("layout") == "channels_last" \
            or nchw_gemm(record):
        return 0
    # a backward transposes its output gradient once for each of its two kernels
    again = reread_gradient_bytes(record)
    if searched:
        return 2 * (record.get("bytes_read", record["bytes"]) + again)
    return 2 * (record["bytes"] + again)


def reread_gradient_bytes(record: dict) -> int:
    """Bytes a GPU's dense convolution backward (conv_bwd) reads a second time: cuDNN
    computes the input gradient and the weight gradient in kernels of their own (dgrad and
    wgrad, or two GEMMs for a 1x1 one: conv_kernels.py's records of the H200 and H100),
    each reading the output gradient, which the record counts once. Where both gradients are
    computed (the record's shape is the input gradient's), its bytes read (output gradient,
    input, weights) less its bytes written (input and weight gradients, the input's and
    weights' sizes) are the output gradient's -- less a bias gradient's few bytes. 0 for
    any other node."""
    if op_class_of(record) != "conv_bwd" or not record.get("shape"):
        return 0
    return max(record.get("bytes_read", 0) - record.get("bytes_written", 0), 0)


def second_pass_bytes(record: dict) -> int:
    """Bytes a GPU norm kernel of training (TRAINING_NORM_CLASSES) reads a second time:
    PyTorch's CUDA batch norm computes the batch statistics in one kernel
    (batch_norm_mean_var) and normalises in another (batch_norm_elementwise), and a norm
    backward reduces over its inputs (the weight gradient, the batch norm's sums) before or
    beside the input-gradient pass -- at a training batch a channel's values span megabytes,
    so the second pass reads its inputs from memory again: the node's bytes read, once more.
    0 for other classes. The GPU fits price only single-pass LayerNorm forwards, so
    fxroof.roofline adds this where a chip has parameters for neither training norm class."""
    return record.get("bytes_read", 0) if op_class_of(record) in TRAINING_NORM_CLASSES else 0


def scratch_buffers(record: dict) -> list[int]:
    """Sizes (bytes) of the buffers a CPU kernel allocates inside one node before its output
    and frees after it -- what fxroof.page_faults replays through the allocator besides the
    node's outputs:
    * an NCHW convolution: oneDNN's blocked copies of its input, weights and output
      (layout_bytes's reorders);
    * a channels-last convolution: the blocked copy of its weights (none where prepacked);
    * an NCHW convolution backward: its operands and results, each side taken as one buffer;
    * a convolution run with ATen's own kernels (op_classes.cpu_native): its im2col columns,
      k x positions elements (none for a 1x1 one of stride 1, unpadded, which reads its
      input as the GEMM's matrix).
    Not the attention fast path's intermediates (qkv, scores, softmax, context): replayed
    with the sizes op_costs.attention counts they fault 2-9x what vit_b_16 measures, so
    the kernel must reuse or size them otherwise; left out, vit_b_16 faults 0.66x of what
    it measures at batch 8.
    Empty for every other node."""
    op_class = op_class_of(record)
    if cpu_native(record):
        sizes = [im2col_bytes(record)]
    elif op_class == "conv":
        weights = conv_weight_bytes(record)
        sizes = [record.get("bytes_read", 0) - weights, weights, record.get("bytes_written", 0)]
    elif op_class == "conv_cl" and not prepacked(record):
        sizes = [conv_weight_bytes(record)]
    elif op_class in BACKWARD_CONV_CLASSES and record.get("layout") != "channels_last":
        sizes = [record.get("bytes_read", 0), record.get("bytes_written", 0)]
    else:
        sizes = []
    return [size for size in sizes if size > 0]


def im2col_bytes(record: dict) -> int:
    """Bytes of the im2col matrix ATen's convolution kernel fills (op_classes.cpu_native):
    k x positions elements of the output's size (gemm_dims); 0 for a 1x1 convolution of
    stride 1, unpadded, whose input is the GEMM's matrix as it is. 0 for a backward too: its
    record holds the input gradient's shape and both gradients' FLOPs, which name neither
    the forward's positions nor its k (its columns are left to the class's fitted rates)."""
    dims = gemm_dims(record)
    if dims is None or PLAIN_POINTWISE_VARIANT in record.get("rule", "") \
            or "_backward" in record["op"]:
        return 0
    batch, positions, _, k = dims
    element = record.get("bytes_written", 0) / math.prod(record["shape"])  # one output
    # k from the FLOPs holds half an element more for a bias (one add an output)
    return round(batch * positions * math.floor(k) * element)


def faulted_bytes(record: dict) -> tuple[float, float]:
    """(bytes its output pages fault in, bytes its layout reorders' buffers fault in) for a
    node of a whole step: the allocator replay's count where the record has one
    (``faulted_bytes``, fxroof.page_faults: the steady state of a process that runs this
    step again and again), else the isolated node's rules (fresh_bytes, layout_bytes)."""
    replayed = record.get("faulted_bytes")
    if replayed is not None:
        return float(replayed), 0.0
    return float(fresh_bytes(record)), float(layout_bytes(record)[1])


def saved_bytes(record: dict) -> int:
    """Bytes of activations saved for backward a node moves (bytes): those it writes in the
    forward and reads in the backward (fxroof.memory.annotate_saved_traffic), at most what
    the node moves. They go to and come from memory, not the cache (calibration.
    kernel_seconds). 0 where oneDNN reorders the node's operands and results
    (reorders_operands): the reorders read and write them, priced at the copy bandwidth
    (layout_bytes), and the kernel works on blocked copies in the cache."""
    if reorders_operands(record):
        return 0
    saved = record.get("saved_bytes_read", 0) + record.get("saved_bytes_written", 0)
    return min(saved, record["bytes"])
