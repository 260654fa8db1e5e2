"""Memory: what a training step holds, from storage liveness over the forward+backward schedule.

The schedule is the eager one: forward nodes in order, then backward nodes in order. A node
allocates a storage when its output lives in one not seen before (views and in-place ops
allocate nothing). A storage is freed after the last node that reads it; storages the forward
returns (model outputs, gradients) and every parameter, buffer and input live throughout.
Saved-for-backward bytes are the activation storages the backward graph reads. The same
storages give each node's saved traffic (annotate_saved_traffic): the bytes of them a forward
node writes and a backward node reads, which a CPU moves through DRAM, not its cache.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree

from fxroof.capture import Capture
from fxroof.keys import BACKWARD, INPUT, ORIGIN, SAVED_TRAFFIC


@dataclass
class MemoryReport:
    """All sizes in bytes."""

    parameter_bytes: int
    buffer_bytes: int
    input_bytes: int
    activation_bytes: int        # every storage the forward allocates
    saved_for_backward_bytes: int
    gradient_bytes: int          # the gradients the backward returns
    optimizer_state_bytes: int   # what the optimizer keeps per parameter (momentum, exp_avg..)
    peak_bytes: int              # parameters + buffers + inputs + peak of live allocations
    peak_node: Optional[str]     # the node at which the peak is reached

    def as_dict(self) -> dict:
        return asdict(self)


def _storages(value):
    for t in pytree.tree_leaves(value):
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            yield StorageWeakRef(storage), storage.nbytes()


def resident_storages(capture: Capture, seen: set) -> dict:
    """Bytes of the storages the step starts with, by placeholder kind (the loss's target
    counts as an input)."""
    resident = {"parameter": 0, "buffer": 0, "input": 0, "constant": 0, "optimizer_state": 0}
    starts = [capture.forward] + ([capture.optimizer] if capture.optimizer is not None else [])
    for graph in starts:
        for node in graph.nodes:
            kind = node.meta.get(INPUT)
            if node.op == "placeholder" and (kind.kind in resident or kind.kind == "target"):
                for ref, size in _storages(node.meta["val"]):
                    if ref not in seen:
                        seen.add(ref)
                        resident["input" if kind.kind == "target" else kind.kind] += size
    return resident


class Allocations:
    """Where in the schedule each new storage is allocated and last read, and its size."""

    def __init__(self, schedule: list, seen: set):
        self.at: dict = {}
        self.size: dict = {}
        self.last_use: dict = {}
        for i, node in enumerate(schedule):
            for arg in node.all_input_nodes:
                for ref, _ in _storages(arg.meta.get("val")):
                    self.last_use[ref] = i
            for ref, size in _storages(node.meta.get("val")):
                if ref not in seen:
                    seen.add(ref)
                    self.at[ref], self.size[ref] = i, size
                    self.last_use.setdefault(ref, i)

    def peak(self, end: int, kept: set) -> tuple[int, Optional[int]]:
        """(peak live bytes, schedule index where it is reached); ``kept`` storages live to
        the end of the step."""
        delta = [0] * (end + 1)
        for ref, i in self.at.items():
            delta[i] += self.size[ref]
            delta[(end if ref in kept else self.last_use[ref] + 1)] -= self.size[ref]
        live = peak = 0
        peak_index = None
        for i in range(end):
            live += delta[i]
            if live > peak:
                peak, peak_index = live, i
        return peak, peak_index


def returned_storages(capture: Capture) -> set:
    """Storages the step hands back (outputs, saved tensors, gradients)."""
    kept = set()
    for graph in capture.graphs():
        output = next(n for n in reversed(graph.nodes) if n.op == "output")
        for arg in output.all_input_nodes:
            kept.update(ref for ref, _ in _storages(arg.meta.get("val")))
    return kept


def _backward_reads(capture: Capture, allocated: dict) -> tuple[set, int]:
    """(storages the backward reads from the forward, bytes of the gradients it returns)."""
    if capture.backward is None:
        return set(), 0
    saved = set()
    for node in capture.backward.nodes:
        if node.op == "placeholder" and node.meta[INPUT].kind == "saved":
            saved.update(r for r, _ in _storages(node.meta["val"]) if r in allocated)
    output = next(n for n in reversed(capture.backward.nodes) if n.op == "output")
    gradients = sum(size for arg in output.all_input_nodes
                    for _, size in _storages(arg.meta.get("val")))
    return saved, gradients


def step_schedule(capture: Capture) -> list:
    """The eager order of a step's call nodes: forward, then backward, then optimizer."""
    return [n for g in capture.graphs() for n in g.nodes if n.op == "call_function"]


def _step_storages(capture: Capture) -> tuple[dict, list, Allocations]:
    """(resident bytes by kind, the eager schedule, its allocations): what both the report
    and the saved traffic are read from."""
    seen: set = set()
    resident = resident_storages(capture, seen)
    schedule = step_schedule(capture)
    return resident, schedule, Allocations(schedule, seen)


def memory_report(capture: Capture) -> MemoryReport:
    resident, schedule, allocations = _step_storages(capture)
    peak, peak_index = allocations.peak(len(schedule), returned_storages(capture))
    forward_count = sum(1 for n in capture.forward.nodes if n.op == "call_function")
    saved, gradients = _backward_reads(capture, allocations.at)
    return MemoryReport(
        parameter_bytes=resident["parameter"],
        buffer_bytes=resident["buffer"],
        input_bytes=resident["input"] + resident["constant"],
        activation_bytes=sum(allocations.size[r] for r, i in allocations.at.items()
                             if i < forward_count),
        saved_for_backward_bytes=sum(allocations.size[r] for r in saved),
        gradient_bytes=gradients,
        optimizer_state_bytes=resident["optimizer_state"],
        peak_bytes=sum(resident.values()) + peak,
        peak_node=schedule[peak_index].name if peak_index is not None else None,
    )


def annotate_saved_traffic(capture: Capture) -> None:
    """Write to ``node.meta[SAVED_TRAFFIC]`` the bytes of saved activations (the forward's
    storages the backward reads) each call node moves: (read, written). A forward node writes
    the saved storage it allocates; a backward node reads the saved storages its inputs view.
    Why it matters: in inference a freed activation's storage is handed to the next output
    while it is still in the cache, but a saved one lives until the backward, so the forward
    writes it to memory untouched since the last step and the backward reads it back after
    the rest of the step has passed through the cache. On a 2-core EPYC, MobileNetV2's
    forward convolutions at batch 1 took 8.2 ms inside an eval step and 10.2 ms inside a
    training one, the same shapes in the same minute (benchmarks/README.md, run 21)."""
    _, schedule, allocations = _step_storages(capture)
    saved, _ = _backward_reads(capture, allocations.at)
    for i, node in enumerate(schedule):
        written = sum(size for ref, size in _storages(node.meta.get("val"))
                      if ref in saved and allocations.at.get(ref) == i)
        read = _saved_bytes_read(node, saved) if node.meta[ORIGIN].phase == BACKWARD else 0
        node.meta[SAVED_TRAFFIC] = (read, written)


def _saved_bytes_read(node, saved: set) -> int:
    """Bytes of the tensors a backward node reads that view saved storages, each storage
    once."""
    counted: set = set()
    total = 0
    for arg in node.all_input_nodes:
        for t in pytree.tree_leaves(arg.meta.get("val")):
            if not isinstance(t, torch.Tensor):
                continue
            ref = StorageWeakRef(t.untyped_storage())
            if ref in saved and ref not in counted:
                counted.add(ref)
                total += t.numel() * t.element_size()
    return total
