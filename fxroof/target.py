"""The target a step is recorded for, and the device-dependent dispatch choices made for it.

fxroof records the ATen program on fake tensors, and the CUDA program must be recorded on a
machine without a GPU. Fake CUDA tensors carry the forward, but autograd's engine asks the
CUDA driver for a primary context before it runs a backward (torch >= 2.11,
``hasPrimaryContext``), which fails without a device. So a CUDA target is recorded on fake
CPU tensors, and every place where PyTorch's dispatch depends on the device makes CUDA's
choice here, from rules that follow PyTorch's own selection code (cited per rule) with the
chip's compute capability as input:

* scaled_dot_product_attention: the backend -- cuDNN, flash, memory-efficient or math --
  as ``select_sdp_backend`` in aten/src/ATen/native/transformers/cuda/sdp_utils.cpp picks it;
* dropout: one fused ``native_dropout`` kernel (``is_fused_kernel_acceptable`` in
  aten/src/ATen/native/Dropout.cpp: CUDA, 0 < p < 1, a non-empty input) where the CPU runs
  bernoulli_ / div_ / mul;
* RNNs: cuDNN's ``_cudnn_rnn`` over the whole stack (``use_cudnn`` in
  aten/src/ATen/native/RNN.cpp; the CPU runs ``mkldnn_rnn_layer`` per layer);
* optimizers: the multi-tensor ``foreach`` kernels (``_default_to_fused_or_foreach`` in
  torch/optim/optimizer.py; the CPU loops over parameters) -- see fxroof.step.

The rules here are pure functions of shapes, dtypes and the capability, tested case by case;
``fxroof.target_dispatch`` applies them while a step is recorded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fxroof.errors import UsageError

CUDA_DEFAULT_CAPABILITY = (8, 0)  # an A100, when a CUDA target names no chip
FLASH, EFFICIENT, CUDNN, MATH = "flash", "efficient", "cudnn", "math"
# The cuDNN the torch 2.14.1+cu130 wheel installs (nvidia-cudnn-cu13 9.24.0.43): above 9.15,
# so cuDNN attention goes first on sm90/sm100 (check_prefer_cudnn_attention), and above 9.22,
# so head dims up to 256 on sm90/sm10x.
CUDNN_VERSION = 92400
# The host allocators whose page faults fxroof can replay (fxroof.page_faults): glibc's malloc
# (what a plain `python` process uses), or a caching allocator that keeps freed pages in the
# process, so that a step run again and again faults nothing once warm -- tcmalloc
# (LD_PRELOAD=libtcmalloc_minimal.so.4), or glibc with MALLOC_MMAP_THRESHOLD_ and
# MALLOC_TRIM_THRESHOLD_ set above the step's largest buffer. Not jemalloc: its default decay
# returns dirty pages to the kernel, and on this project's CPU it faulted 26-65 MB a call in
# ResNet-50 and DenseNet-121 at batch 1 (benchmarks/README.md).
GLIBC, CACHING = "glibc", "caching"
ALLOCATORS = (GLIBC, CACHING)
# Which of those a process ran, by the malloc fxroof.device.host_allocator finds in it
# (jemalloc: neither, as above).
ALLOCATOR_OF_HOST = {"glibc": GLIBC, "tcmalloc": CACHING}


@dataclass(frozen=True)
class Target:
    """Where the recorded step runs: 'cpu', or 'cuda' with a compute capability; on a CPU,
    the host allocator its process uses (ALLOCATORS)."""

    device: str = "cpu"
    capability: Optional[tuple[int, int]] = None
    chip: Optional[str] = None
    allocator: str = GLIBC

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    @classmethod
    def of(cls, device: Optional[str], chip=None, allocator: Optional[str] = None) -> "Target":
        """The target for a capture ``device`` ('cpu', 'cuda', 'cuda:N'; None: the chip's)
        and an optional Chip: a GPU implies 'cuda' -- at its compute capability, or at
        CUDA_DEFAULT_CAPABILITY where it has none (an AMD GPU: PyTorch's ROCm build runs it
        as its 'cuda' device, with the same autocast and dispatch).
        ``allocator``: the CPU process's host allocator (default glibc); a CUDA step's
        tensors live in PyTorch's caching allocator whatever it is (fxroof.page_faults)."""
        capability = getattr(chip, "compute_capability", None)
        chip_id = getattr(chip, "id", None)
        gpu = capability or getattr(chip, "cls", None) == "gpu"
        kind = (device or ("cuda" if gpu else "cpu")).split(":")[0]
        allocator = allocator or GLIBC
        if allocator not in ALLOCATORS:
            raise UsageError(f"Unknown allocator {allocator!r}: fxroof replays the page faults "
                             f"of {' or '.join(repr(a) for a in ALLOCATORS)} ('caching' is "
                             "an allocator that keeps freed pages, such as tcmalloc, or glibc "
                             "with MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set "
                             "high). Pass one of those.")
        if kind == "cuda":
            return cls("cuda", tuple(capability or CUDA_DEFAULT_CAPABILITY), chip_id, allocator)
        return cls("cpu", None, chip_id, allocator)


# ---- scaled_dot_product_attention -----------------------------------------------------------
@dataclass(frozen=True)
class AttentionCall:
    """What select_sdp_backend reads of one call (dense (B, H, L, E) tensors)."""

    q_shape: tuple
    k_shape: tuple
    v_shape: tuple
    dtype: torch.dtype
    has_mask: bool = False
    mask_dim: int = 0
    dropout_p: float = 0.0
    is_causal: bool = False
    requires_grad: bool = False
    enable_gqa: bool = False
    last_dim_contiguous: bool = True


def _sm_in(capability, low, high) -> bool:
    return low <= tuple(capability) <= high


def _shapes_ok(c: AttentionCall) -> bool:
    """check_tensor_shapes, check_batch_size_and_num_heads_dense,
    check_nonzero_sequence_lengths_dense, check_last_dim_stride_equals_1_dense."""
    if not (len(c.q_shape) == len(c.k_shape) == len(c.v_shape) == 4):
        return False
    (bq, hq, lq, _), (bk, hk, lk, _), (bv, hv, _, _) = c.q_shape, c.k_shape, c.v_shape
    if not (bq == bk == bv) or hk != hv or min(lq, lk) == 0 or not c.last_dim_contiguous:
        return False
    return hq == hk or (c.enable_gqa and hq % hk == 0)


def can_use_flash(c: AttentionCall, capability) -> bool:
    """can_use_flash_attention: no mask, q/k/v head dims equal and <= 256, sm80..sm121,
    fp16/bf16, causal only for square attention, and no training with head dim in
    (192, 224] (or (224, 256] with dropout) on sm86/sm89/sm120/sm121."""
    head = c.q_shape[-1]
    if c.has_mask or not (c.q_shape[-1] == c.k_shape[-1] == c.v_shape[-1]) or head > 256:
        return False
    if not _sm_in(capability, (8, 0), (12, 1)) or c.dtype not in (torch.float16, torch.bfloat16):
        return False
    if c.is_causal and c.q_shape[-2] != c.k_shape[-2]:
        return False
    consumer = _sm_in(capability, (8, 6), (8, 9)) or _sm_in(capability, (12, 0), (12, 1))
    if c.requires_grad and consumer and not (head <= 192 or (c.dropout_p == 0 and head > 224)):
        return False
    return _shapes_ok(c)


def _gemm_alignment(c: AttentionCall, capability) -> int:
    """minimum_gemm_alignment: 4 on sm80+, raised to 128 bits of elements on tensor cores
    (sm80+, or sm70+ in half precision)."""
    half = c.dtype in (torch.float16, torch.bfloat16)
    tensor_cores = capability[0] >= 8 or (capability[0] >= 7 and half)
    alignment = 4 if capability[0] >= 8 else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


def can_use_efficient(c: AttentionCall, capability) -> bool:
    """can_use_mem_efficient_attention: sm50..sm121, q/k head dims equal, q and v head dims
    aligned to the GEMM alignment, fp32/fp16 (and bf16 on sm80+); masks are supported."""
    if not _sm_in(capability, (5, 0), (12, 1)) or c.q_shape[-1] != c.k_shape[-1]:
        return False
    alignment = _gemm_alignment(c, capability)
    if c.q_shape[-1] % alignment or c.v_shape[-1] % alignment:
        return False
    dtypes = (torch.float16, torch.float32) + ((torch.bfloat16,) if capability[0] >= 8 else ())
    return c.dtype in dtypes and _shapes_ok(c)


def can_use_cudnn(c: AttentionCall, capability, cudnn_version: int = CUDNN_VERSION) -> bool:
    """can_use_cudnn_attention: sm80..sm121, fp16/bf16 (bf16 from sm80), dropout a multiple
    of 1/16, a 2-D or 4-D mask, head dims multiples of 8 up to 128 (256 on sm90/sm10x with a
    recent cuDNN; backward there only for <=128, 192/128 or 256/256), key length > 1."""
    if not _sm_in(capability, (8, 0), (12, 1)) or c.dtype not in (torch.float16, torch.bfloat16):
        return False
    if c.dropout_p * 16 != int(c.dropout_p * 16) or (c.has_mask and c.mask_dim not in (2, 4)):
        return False
    d_qk, d_v = c.q_shape[-1], c.v_shape[-1]
    hopper_or_blackwell = (capability[0] == 9 and capability[1] == 0) or capability[0] == 10
    limit = 256 if hopper_or_blackwell and cudnn_version > 92200 else 128
    if max(d_qk, d_v) > limit or d_qk % 8 or d_v % 8 or c.k_shape[-2] == 1:
        return False
    if c.requires_grad and limit == 256 and not (
            max(d_qk, d_v) <= 128 or (d_qk, d_v) in ((192, 128), (256, 256))):
        return False
    if c.dropout_p and c.q_shape[-2] == 1:
        return False
    return _shapes_ok(c) and c.q_shape[0] <= 65535 and c.q_shape[1] <= 65535


def prefers_cudnn(capability, cudnn_version: int = CUDNN_VERSION) -> bool:
    """check_prefer_cudnn_attention (CUDA 13 wheels): cuDNN first on sm9x/sm10x when the
    runtime cuDNN is newer than 9.15."""
    return cudnn_version > 91500 and capability[0] in (9, 10)


def sdpa_backend(c: AttentionCall, capability) -> str:
    """select_sdp_backend's choice: the first backend of the priority order (flash,
    efficient, math, with cuDNN first where preferred) whose constraints hold."""
    order = [FLASH, EFFICIENT]
    if prefers_cudnn(capability):
        order.insert(0, CUDNN)
    checks = {FLASH: can_use_flash, EFFICIENT: can_use_efficient, CUDNN: can_use_cudnn}
    return next((b for b in order if checks[b](c, capability)), MATH)


# ---- dropout and RNNs -----------------------------------------------------------------------
def fused_dropout(target: Target, p: float, train: bool, numel: int) -> bool:
    """is_fused_kernel_acceptable (aten/src/ATen/native/Dropout.cpp), for a training call."""
    return target.is_cuda and train and 0 < p < 1 and numel > 0


def cudnn_rnn(target: Target, mode: str, dtype: torch.dtype) -> bool:
    """use_cudnn (aten/src/ATen/native/RNN.cpp): a CUDA input of a cuDNN dtype; every RNN
    mode (LSTM, GRU, RNN_TANH, RNN_RELU) has a cuDNN path."""
    return target.is_cuda and dtype in (torch.float16, torch.bfloat16, torch.float32,
                                        torch.float64) and mode in (
        "LSTM", "GRU", "RNN_TANH", "RNN_RELU")


def check_amp(target: Target, amp: Optional[str]) -> Optional[torch.dtype]:
    """The autocast dtype for ``amp`` ('fp16' | 'bf16' | None) on the target, or a clear
    error where the target's autocast does not run it."""
    if amp is None:
        return None
    dtypes = {"fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
              "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
    dtype = dtypes.get(str(amp).lower())
    if dtype is None:
        raise UsageError(f"Unknown --amp '{amp}': use fp16 or bf16 (autocast's lower "
                         "precision; parameters stay fp32).")
    if target.is_cuda and dtype == torch.bfloat16 and target.capability < (8, 0):
        raise UsageError(
            f"bf16 autocast needs a GPU with compute capability 8.0 or newer (Ampere), and "
            f"{target.chip or 'this target'} has {target.capability[0]}."
            f"{target.capability[1]}: torch.cuda.is_bf16_supported() is False there. Use "
            "--amp fp16, or a newer chip.")
    return dtype
