"""Which allocations of a step fault their pages in: a model of glibc's main malloc arena.

On Linux, PyTorch's CPU tensors come from glibc's malloc (posix_memalign). Memory the kernel
hands a process is zeroed and mapped on first touch, one page fault per 4 KiB page, and on
this project's CPU that first touch runs at about 3 GB/s -- slower than a convolution reads
its operands. Whether a tensor's pages are new depends on the allocator's state, which
mallopt(3) and malloc.c describe:

* a request at or above the mmap threshold, that the heap cannot serve from a free chunk, gets
  a fresh mmap: every page faults, call after call;
* freeing such a mapping raises the threshold to its size (up to 32 MiB: DEFAULT_MMAP_
  THRESHOLD_MAX on a 64-bit system) and the trim threshold to twice that;
* other requests take the smallest free chunk that fits, or grow the heap's top (brk); pages
  past the highest ever touched (since the last trim) fault;
* a free that leaves the top chunk at or above the trim threshold gives the top back to the
  kernel, down to ``top_pad`` -- and those pages fault again when the heap grows next time.

So a forward pass that frees and reallocates the same activations every call faults a
steady number of bytes per call, set by its allocation sizes and order. ``steady_faults``
replays a step's allocations until the arena settles and reports the bytes each allocation
faults in the last call. Checked against the kernel's minor-fault count of eager torchvision
models in a fresh process (benchmarks/README.md, "Page faults").

A step's first call also leaves allocations behind that later calls never free: the state a
kernel library builds the first time it runs an op (oneDNN's primitives, autograd's engine).
Made where the heap's top is at that moment, such a block pins everything below it: freed
memory under it stays in the heap's bins, never trimmed, and the next call reuses it without
faulting. It matters for a training step, whose first backward starts with every saved
activation live, at the heap's high-water mark: at the end of a steady-state training step of
mobilenet_v2 at batch 1, glibc's mallinfo2 shows 80-85 MB free inside the heap and a top
chunk of 1-7 MB (nothing to trim), and the next forward faults 10-14 MB, not the 80 MB a
trimmed top would. A ``pin`` event is such a block: placed at the top on the first call
only, never freed.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Union

PAGE = 4096
MMAP_THRESHOLD_MAX = 32 * 2 ** 20   # DEFAULT_MMAP_THRESHOLD_MAX, 64-bit
DEFAULT_THRESHOLD = 128 * 1024      # M_MMAP_THRESHOLD and M_TRIM_THRESHOLD at start
TOP_PAD = 128 * 1024                # M_TOP_PAD
CHUNK_OVERHEAD = 16                 # the size field and posix_memalign's slack, rounded
ALIGNMENT = 64                      # c10's CPU alignment

# An event of a step: ("alloc", key, bytes), ("free", key), or ("pin", key, bytes): a block
# the first call leaves at the top of the heap for good (see above).
Event = Union[tuple[str, Hashable, int], tuple[str, Hashable]]


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass
class MainArena:
    """glibc's main arena, for blocks large enough that bins by size do not matter: best-fit
    free chunks (coalesced), a top chunk grown by brk and trimmed, mmap above a threshold."""

    mmap_threshold: int = DEFAULT_THRESHOLD
    trim_threshold: int = DEFAULT_THRESHOLD
    faulted: int = 0                          # bytes faulted in so far
    _free: list = field(default_factory=list)  # sorted (address, size) of free chunks
    _top: int = 0                             # where the top chunk starts
    _brk: int = 0                             # the heap's end
    _resident: int = 0                        # heap pages below this have been touched
    _live: dict = field(default_factory=dict)  # key -> ("heap", address, size) | ("mmap", size)

    def malloc(self, key: Hashable, nbytes: int) -> int:
        """Allocate and touch ``nbytes``; returns the bytes this faulted in."""
        size = _round_up(nbytes + CHUNK_OVERHEAD, ALIGNMENT)
        before = self.faulted
        fits = [i for i, (_, s) in enumerate(self._free) if s >= size]
        if fits:
            i = min(fits, key=lambda j: self._free[j][1])  # best fit, lowest address on ties
            address, free = self._free.pop(i)
            if free > size:
                bisect.insort(self._free, (address + size, free - size))
            self._use(key, address, size)
        elif size >= self.mmap_threshold and self._brk - self._top < size:
            mapped = _round_up(size, PAGE)
            self._live[key] = ("mmap", mapped)
            self.faulted += mapped
        else:
            self._grow(key, size)
        return self.faulted - before

    def pin(self, key: Hashable, nbytes: int) -> int:
        """Place a block that is never freed at the top of the heap (not in a free chunk:
        it is made where the heap ends); returns the bytes this faulted in."""
        before = self.faulted
        self._grow(key, _round_up(nbytes + CHUNK_OVERHEAD, ALIGNMENT))
        return self.faulted - before

    def _grow(self, key, size: int) -> None:
        """A chunk carved from the top, the heap extended (brk) as far as it needs."""
        address = self._top
        self._top += size
        self._brk = max(self._brk, _round_up(self._top + TOP_PAD, PAGE))
        self._use(key, address, size)

    def free(self, key: Hashable) -> None:
        kind, *where = self._live.pop(key)
        if kind == "mmap":
            (size,) = where
            if self.mmap_threshold < size <= MMAP_THRESHOLD_MAX:  # the dynamic threshold
                self.mmap_threshold, self.trim_threshold = size, 2 * size
            return
        address, size = where
        i = bisect.bisect_left(self._free, (address, 0))
        if i > 0 and sum(self._free[i - 1]) == address:  # coalesce with the chunk before
            address, before = self._free.pop(i - 1)
            size += before
            i -= 1
        if i < len(self._free) and self._free[i][0] == address + size:  # and after
            size += self._free.pop(i)[1]
        if address + size != self._top:
            bisect.insort(self._free, (address, size))
            return
        self._top = address
        if self._brk - self._top >= self.trim_threshold:  # systrim: give the top back
            self._brk = _round_up(self._top + TOP_PAD, PAGE)
            self._resident = min(self._resident, self._brk)

    def _use(self, key, address: int, size: int) -> None:
        self._live[key] = ("heap", address, size)
        end = _round_up(address + size, PAGE)
        if end > self._resident:
            self.faulted += end - max(self._resident, address - address % PAGE)
            self._resident = end


def steady_faults(events: Iterable[Event], calls: int = 4) -> dict:
    """Bytes each allocation key faults in the last of ``calls`` replays of ``events`` (one
    step's allocations and frees, every block freed by its end but the pinned ones, which the
    first call alone makes) on a fresh arena."""
    events = list(events)
    arena = MainArena()
    faults: dict = {}
    for call in range(calls):
        faults = {}
        for event in events:
            if event[0] == "alloc":
                faults[event[1]] = arena.malloc((call, event[1]), event[2])
            elif event[0] == "pin":
                if call == 0:
                    arena.pin(event[1], event[2])
            else:
                arena.free((call, event[1]))
    return faults
