"""The page-fault pass: what each node of a step faults in, replayed through glibc's allocator.

A CPU step that runs again and again frees and reallocates its activations every call, and
the kernel zeroes and maps whatever pages the allocator takes anew (fxroof.heap). At batch 8
this is a quarter to a half of an eager CNN's time on this project's CPU. The pass replays
the step's allocations in eager order -- every new storage where its node runs, freed after
its last reader (fxroof.memory's schedule: outputs the step returns live to its end), and
the scratch buffers a kernel allocates and frees inside a node
(hidden_bytes.scratch_buffers: oneDNN's blocked copies) -- through a model of the main
arena, until it settles, and writes each node's faulted bytes to ``node.meta[FAULTS]``.
The time model prices them at the device's first-touch rate (hidden_bytes.faulted_bytes).

Parameters, buffers and inputs are allocated before the step and stay; memory returned by
the step (the outputs, gradients) is taken as freed when the step ends, as a loop that drops
them before the next call does. A training step's first backward pins the heap at the
forward's high-water mark (fxroof.heap: the state its kernels build on first use), so the
activations a later forward allocates come back from the heap's bins instead of faulting.
With a caching allocator (``allocator="caching"``: tcmalloc, or glibc with its mmap and trim
thresholds set high) every node faults 0 bytes: freed pages stay in the process. Not
modelled: allocations smaller than a page that the kernels make, other threads' arenas, and
jemalloc, whose decay returns pages on its own schedule.
"""
from __future__ import annotations

from collections import defaultdict

from fxroof import heap, hidden_bytes
from fxroof.capture import Capture
from fxroof.cost_pass import is_costed
from fxroof.graph import node_record
from fxroof.keys import BACKWARD, FAULTS, ORIGIN
from fxroof.memory import (Allocations, resident_storages, returned_storages,
                           step_schedule)
from fxroof.target import CACHING, Target


# The blocks a training step's first backward leaves for good (fxroof.heap: autograd's and
# oneDNN's state), taken as one small block: its size does not matter, where it lies does.
FIRST_BACKWARD, PIN_BYTES = "first backward", 64


def step_events(capture: Capture) -> tuple[list, dict]:
    """(allocator events of one step, the call node each allocation belongs to)."""
    seen: set = set()
    resident_storages(capture, seen)
    schedule = step_schedule(capture)
    allocations = Allocations(schedule, seen)
    kept = returned_storages(capture)
    allocated_at, freed_after = defaultdict(list), defaultdict(list)
    for ref, index in allocations.at.items():
        allocated_at[index].append(ref)
        if ref not in kept:
            freed_after[allocations.last_use[ref]].append(ref)
    events, owner = [], {}
    pinned = False
    for index, node in enumerate(schedule):
        if not pinned and node.meta[ORIGIN].phase == BACKWARD:
            # the first backward's library state, made at the forward's high-water mark
            events.append(("pin", FIRST_BACKWARD, PIN_BYTES))
            pinned = True
        # keyed by the node itself: forward and backward graphs may reuse a node's name
        sizes = _scratch(node)
        scratch = [(node, i) for i in range(len(sizes))]
        events.extend(("alloc", key, size) for key, size in zip(scratch, sizes))
        for key in scratch + allocated_at[index]:
            owner[key] = node
        events.extend(("alloc", ref, allocations.size[ref]) for ref in allocated_at[index])
        events.extend(("free", key) for key in scratch)
        events.extend(("free", ref) for ref in freed_after[index])
    events.extend(("free", ref) for ref in allocations.at if ref in kept)
    return events, owner


def _scratch(node) -> list[int]:
    return hidden_bytes.scratch_buffers(node_record(node)) if is_costed(node) else []


def annotate_faults(capture: Capture, target: Target) -> None:
    """Write the bytes each call node faults in, in the steady state of a process that runs
    this step again and again, to ``node.meta[FAULTS]`` (0 where nothing faults; None on a
    CUDA target, whose caching allocator keeps its memory). A CPU process with a caching
    allocator (target.CACHING) keeps every page it freed, so nothing faults once warm."""
    if target.is_cuda:
        for node in step_schedule(capture):
            node.meta[FAULTS] = None
        return
    if target.allocator == CACHING:
        for node in step_schedule(capture):
            node.meta[FAULTS] = 0
        return
    events, owner = step_events(capture)
    faulted = defaultdict(int)
    for key, nbytes in heap.steady_faults(events).items():
        faulted[owner[key]] += nbytes
    for node in step_schedule(capture):
        node.meta[FAULTS] = faulted[node]
