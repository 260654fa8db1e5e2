"""Devices and dtypes as torch sees them, and the one way fxroof times a piece of eager code.

``repeat(step, warmup, repeats)`` is the warm-up-then-repeat loop every measurement uses
(latency, the eager step, chip roofs); ``Stopwatch`` times a region on a device, synchronising
CUDA at both ends so the time is the device's, not the launch's. Statistics come from
``timers.summarize``: one median, one quartile definition everywhere.
"""
from __future__ import annotations

import ctypes.util
import os
import time
from typing import Callable, NamedTuple, Optional, TypeVar

import torch

from fxroof.errors import FxroofError, UsageError
from fxroof.units import DTYPE_ALIASES, FLOAT_DTYPES

T = TypeVar("T")


def check_device(device) -> torch.device:
    """The torch.device to run on; a clear error for a device fxroof cannot use here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise UsageError(f"Unknown device '{device}': use 'cpu' or 'cuda' (or 'cuda:N').") \
            from None
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"fxroof runs on 'cpu' or 'cuda', not '{device}'.")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise FxroofError(
            f"--device {device} was asked for but CUDA is not available here "
            "(torch.cuda.is_available() is False: no GPU, or a CPU-only torch build). "
            "Time on the CPU with --device cpu, or run on a machine with a GPU.")
    return dev


class GpuShape(NamedTuple):
    """What a GPU's time-model fits need to know of it (fxroof.probes)."""

    units: int        # multiprocessors (SMs, CUs): the waves a GEMM's tiles run in
    l2_bytes: float   # L2 cache: a kernel moving several times it streams from DRAM
    vendor: str = "NVIDIA"        # "AMD" under ROCm, whose kernels are not CUDA's
    capability: tuple = ()        # CUDA compute capability (major, minor); () under ROCm
    clock_hz: float = 0.0         # the SMs' boost clock (Hz); 0 where the driver gives none


def gpu_shape(device: torch.device) -> Optional[GpuShape]:
    """The multiprocessors and L2 of a CUDA (or ROCm) device, None for any other."""
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        return GpuShape(int(props.multi_processor_count), float(props.L2_cache_size), "AMD")
    return GpuShape(int(props.multi_processor_count), float(props.L2_cache_size), "NVIDIA",
                    (int(props.major), int(props.minor)),
                    1e3 * float(getattr(props, "clock_rate", 0) or 0))  # clock_rate: kHz


# oneDNN computes a CPU convolution in a layout blocked by channels, as many a block as its
# jit kernels' vectors hold fp32 lanes: nChw16c with AVX-512, nChw8c with AVX2 (its
# jit_avx512_core and jit_avx2 convolutions; ONEDNN_VERBOSE names the formats aBcd16b and
# aBcd8b). ATen's CPU capability names the same ISA.
ONEDNN_BLOCKS = {"AVX512": 16, "AVX2": 8}


def layout_block(device) -> int:
    """Channels per block of the layout oneDNN reorders an NCHW convolution's tensors into
    on ``device`` (hidden_bytes.unblocked_result_bytes); 0 on a GPU, where this torch has no
    oneDNN, and on a CPU whose vector ISA is neither of ONEDNN_BLOCKS' (no rule known)."""
    if torch.device(device).type != "cpu" or not torch.backends.mkldnn.is_available():
        return 0
    return ONEDNN_BLOCKS.get(torch.backends.cpu.get_cpu_capability(), 0)


def host_allocator(maps: Optional[str] = None) -> str:
    """The malloc this process runs: 'tcmalloc' or 'jemalloc' where one is loaded
    (LD_PRELOAD maps it into the process), else glibc's. ``maps``: the text of
    /proc/self/maps, read when not given ('' where there is none)."""
    if maps is None:
        try:
            with open("/proc/self/maps") as f:
                maps = f.read()
        except OSError:
            maps = ""
    return next((name for name in ("tcmalloc", "jemalloc") if f"/lib{name}" in maps), "glibc")


def caching_allocator_env(env: dict) -> dict:
    """``env`` with tcmalloc preloaded (LD_PRELOAD, before what it already preloads): the
    environment of a fresh process that should run a caching allocator, which keeps the
    pages it freed (fxroof.target.CACHING). A clear error where no tcmalloc is installed."""
    found = ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")
    if not found:
        raise UsageError("--allocator caching measures in processes that run tcmalloc, and no "
                         "libtcmalloc is installed here. Install it (Debian and Ubuntu: "
                         "apt-get install libtcmalloc-minimal4), or measure with the default "
                         "--allocator glibc.")
    preloaded = [found] + [lib for lib in env.get("LD_PRELOAD", "").split(os.pathsep) if lib]
    return {**env, "LD_PRELOAD": os.pathsep.join(preloaded)}


def parse_dtype(dtype) -> Optional[torch.dtype]:
    """None, a floating torch.dtype, or one of its names ('bf16', 'float16', ...)."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    else:
        name = DTYPE_ALIASES.get(str(dtype).lower())
    if name not in FLOAT_DTYPES:
        raise UsageError(f"Unsupported dtype '{dtype}'. fxroof runs models in a floating-point "
                         f"dtype: {', '.join(FLOAT_DTYPES)}.")
    return getattr(torch, name)


def available_bytes(dev: torch.device, meminfo: str = "/proc/meminfo",
                    cgroup: str = "/sys/fs/cgroup") -> Optional[int]:
    """Bytes a step on ``dev`` can still allocate, or None where unknown: on a Linux CPU the
    kernel's MemAvailable (what can be had without swapping), or less where the process's
    cgroup (a container's memory limit) leaves less. Not a GPU's: its caching allocator
    holds blocks it would hand out again, and running out there raises a catchable error."""
    if dev.type != "cpu":
        return None
    free = _meminfo_available(meminfo)
    limit = _read_int(os.path.join(cgroup, "memory.max"))
    used = _read_int(os.path.join(cgroup, "memory.current"))
    if limit is not None and used is not None:
        free = min(free, limit - used) if free is not None else limit - used
    return free


def _meminfo_available(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: str) -> Optional[int]:
    """A cgroup file's number; None where it is absent or "max" (no limit)."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def out_of_memory(error: BaseException) -> bool:
    """Whether an allocation failed for want of memory: CUDA's caching allocator says "out
    of memory" (torch.cuda.OutOfMemoryError), the CPU's "can't allocate memory" (a plain
    RuntimeError from glibc's refusal)."""
    return isinstance(error, torch.cuda.OutOfMemoryError) or \
        "out of memory" in str(error) or "can't allocate memory" in str(error)


def random_like(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """A real tensor to run with: normal floats, ones for masks, zeros for indices (valid
    token ids and positions)."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype, device=device)
    return torch.zeros(shape, dtype=dtype, device=device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Seconds between ``start()`` and each ``lap()``, the device drained at both ends."""

    def __init__(self, device: torch.device, clock: Callable[[], float] = time.perf_counter):
        self.device = device
        self._clock = clock
        self._last = 0.0

    def start(self) -> None:
        synchronize(self.device)
        self._last = self._clock()

    def lap(self) -> float:
        synchronize(self.device)
        now = self._clock()
        elapsed, self._last = now - self._last, now
        return elapsed

    def time(self, fn: Callable[[], object]) -> float:
        self.start()
        fn()
        return self.lap()


def repeat(step: Callable[[], T], warmup: int, repeats: int,
           progress: Optional[Callable[[int, int], None]] = None) -> list[T]:
    """Run ``step`` ``warmup`` times untimed (allocation, kernel selection, caches), then
    ``repeats`` times; returns the results of the repeats."""
    results = []
    for i in range(warmup + repeats):
        result = step()
        if i >= warmup:
            results.append(result)
        if progress:
            progress(i + 1, warmup + repeats)
    return results
