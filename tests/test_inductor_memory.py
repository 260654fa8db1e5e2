"""A compiled step's page faults: Inductor's memory plan (fxroof.inductor_memory) replayed
through the model of glibc's arena (fxroof.heap).

Expected bytes follow from the rules the modules state: a block of 32 MiB or more is mapped
afresh every call and faults its size rounded up to pages after 16 bytes of overhead
(+ 4 KiB for a whole number of MiB); a buffer written in place of another, or taking a freed
buffer of exactly its size, allocates nothing.
"""
import pytest
import torch
from torch import nn

import fxroof
from fxroof.inductor_memory import LIBRARY, PLAN, owned_faults, plan_events

MIB = 2 ** 20
PAGE = 4096


def _alloc(name, nbytes, by=PLAN, inplace_of=None, returned=False):
    return {"name": name, "bytes": nbytes, "by": by, "inplace_of": inplace_of,
            "returned": returned}


def _kernel(owner, allocations, frees=(), scratch=(), outputs=None, unpacks=None):
    names = [a["name"] for a in allocations] if outputs is None else outputs
    return owner, {"allocations": allocations, "frees": list(frees), "outputs": names,
                   "unpacks": unpacks}, list(scratch)


def test_in_place_writes_and_exact_size_reuse_allocate_nothing():
    # a: a library kernel's 64 MiB result (fresh every call); b: written in place of a;
    # c: a new 64 MiB buffer while b is live; d: takes b's freed buffer (same size) and is
    # returned. Two 64 MiB mappings per call -- not the four an allocation per output makes.
    step = [_kernel("a", [_alloc("a", 64 * MIB, by=LIBRARY)]),
            _kernel("b", [_alloc("b", 64 * MIB, inplace_of="a")], frees=["a"]),
            _kernel("c", [_alloc("c", 64 * MIB)], frees=["b"]),
            _kernel("d", [_alloc("d", 64 * MIB, returned=True)], frees=["c"])]
    faults = owned_faults(plan_events([step]))
    assert {k: faults.get(k, 0) for k in "abcd"} == \
        {"a": 64 * MIB + PAGE, "b": 0, "c": 64 * MIB + PAGE, "d": 0}


def test_a_freed_buffer_of_another_size_is_not_reused():
    step = [_kernel("a", [_alloc("a", 64 * MIB)]),
            _kernel("b", [_alloc("b", 48 * MIB)], frees=["a"]),
            _kernel("c", [_alloc("c", 48 * MIB + 64, returned=True)], frees=["b"])]
    faults = owned_faults(plan_events([step]))
    assert faults["b"] == 48 * MIB + PAGE
    assert faults["c"] == 48 * MIB + PAGE  # 48 MiB + 64 + 16 bytes: one page more


def test_a_library_result_is_fresh_even_when_a_buffer_of_its_size_is_free():
    step = [_kernel("a", [_alloc("a", 64 * MIB)]),
            _kernel("b", [_alloc("b", 64 * MIB, by=LIBRARY)], frees=["a"]),
            _kernel("c", [_alloc("c", 64 * MIB)], frees=["b"])]
    events = plan_events([step])
    assert [e[0] for e in events if e[0] == "alloc"] == ["alloc"] * 2  # a, b; c reuses a
    faults = owned_faults(events)
    assert faults["b"] == 64 * MIB + PAGE and faults.get("c", 0) == 0


def test_scratch_is_allocated_and_freed_inside_its_kernel():
    step = [_kernel("conv", [_alloc("y", MIB, by=LIBRARY, returned=True)],
                    scratch=[64 * MIB])]
    events = plan_events([step])
    assert events[:3] == [("alloc", ("conv", 0), 64 * MIB), ("alloc", ("conv", "y"), MIB),
                          ("free", ("conv", 0))]
    assert events[-1] == ("free", ("conv", "y"))  # returned: freed when the step ends
    assert owned_faults(events)["conv"] >= 64 * MIB + PAGE


def test_a_backward_lowering_starts_with_the_pin():
    forward = [_kernel("f", [_alloc("f", MIB, returned=True)])]
    backward = [_kernel("g", [_alloc("g", MIB, returned=True)])]
    events = plan_events([forward, backward], pin_before=1)
    assert events.index(("pin", "first backward", 64)) == 1


class _TwoConvolutions(nn.Module):
    def __init__(self, between: nn.Module, after: nn.Module):
        super().__init__()
        self.conv1, self.between = nn.Conv2d(64, 64, 1), between
        self.conv2, self.after = nn.Conv2d(64, 64, 1), after

    def forward(self, x):
        return self.after(self.conv2(self.between(self.conv1(x)))).sum()


@pytest.mark.parametrize("between, after", [
    # each ReLU is written in place of the result it reads; counting every output of
    # 32 MiB or more as fresh, as an eager step's rule does, would charge the ReLUs too
    (nn.ReLU(), nn.ReLU()),
    # EfficientNet's block: the batch norm and the SiLU after it are one kernel that keeps
    # both buffers, each written over the one before (``buf1 = buf0  # reuse; buf2 = buf1
    # # reuse``), so the kernel's output is the first convolution's result, reused
    (nn.Sequential(nn.BatchNorm2d(64), nn.SiLU()), nn.Identity()),
], ids=["relu", "batch-norm-silu-chain"])
def test_the_compiled_view_faults_what_inductor_allocates(between, after):
    # (8, 64, 128, 128) fp32 is exactly 32 MiB: each convolution's result is a fresh mapping
    # of 32 MiB + 4 KiB every call (oneDNN allocates it); the kernels between write in
    # place, and the sum's scalar is a heap block.
    g = fxroof.analyze(_TwoConvolutions(between, after).eval(), torch.randn(8, 64, 128, 128),
                       compiled=True, memory_format="channels_last")
    records = g.records()
    convolutions = [r for r in records if r["op"] == "convolution"]
    assert len(convolutions) == 2
    for r in convolutions:
        assert 32 * MIB + PAGE <= r["faulted_bytes"] < 32 * MIB + MIB  # + the blocked weights
    others = [r for r in records if r["op"] != "convolution"]
    assert all(r["faulted_bytes"] is not None for r in others)
    assert sum(r["faulted_bytes"] for r in others) < MIB


def test_a_result_unpacked_by_a_node_less_kernel_faults_in_the_call_that_made_it():
    # with freezing, a oneDNN convolution returns a tuple and a MultiOutput kernel, which the
    # view keeps no node for (owner None), names its result: the call allocated it
    step = [_kernel("conv", [], outputs=["buf0"]),
            _kernel(None, [_alloc("y", 64 * MIB, by=LIBRARY)], unpacks="buf0"),
            _kernel("relu", [_alloc("z", MIB, returned=True)], frees=["y"])]
    faults = owned_faults(plan_events([step]))
    assert faults["conv"] == 64 * MIB + PAGE and None not in faults


def test_a_frozen_step_faults_its_prepacked_convolutions_results():
    # frozen, each convolution and its ReLU are one prepacked oneDNN call whose 32 MiB result
    # is mapped afresh every call: the faults belong to those calls, none is lost
    g = fxroof.analyze(_TwoConvolutions(nn.ReLU(), nn.ReLU()).eval(),
                       torch.randn(8, 64, 128, 128), compiled=True, freeze=True,
                       memory_format="channels_last")
    calls = [r for r in g.records() if r["op"].startswith("_convolution_pointwise")]
    assert len(calls) == 2
    for r in calls:
        assert 32 * MIB + PAGE <= r["faulted_bytes"] < 32 * MIB + MIB


def test_a_compiled_step_with_a_caching_allocator_faults_nothing():
    # the same 32 MiB convolution results under tcmalloc (or glibc with its thresholds set
    # high): the process keeps the pages it freed, so no kernel faults once warm
    g = fxroof.analyze(_TwoConvolutions(nn.ReLU(), nn.ReLU()).eval(),
                       torch.randn(8, 64, 128, 128), compiled=True,
                       memory_format="channels_last", allocator="caching")
    assert g.model.allocator == "caching"
    assert {r["faulted_bytes"] for r in g.records()} == {0}


def test_a_buffer_allocated_by_a_slice_writer_is_not_allocated_again_where_it_is_scheduled():
    # a concatenation's result is allocated by the first kernel that writes one of its
    # slices; the concatenation itself, scheduled later, allocates nothing
    step = [_kernel("slice", [_alloc("cat", 64 * MIB)]),
            _kernel("cat", [_alloc("cat", 64 * MIB)]),
            _kernel("norm", [_alloc("y", 64 * MIB, returned=True)], frees=["cat"])]
    events = plan_events([step])
    assert [e[1] for e in events if e[0] == "alloc"] == [("slice", "cat"), ("norm", "y")]


class _DenseLayer(nn.Module):
    """DenseNet's pattern: the input concatenated with a convolution of it, then a batch
    norm and ReLU of the concatenation."""

    def __init__(self):
        super().__init__()
        self.conv1, self.norm = nn.Conv2d(64, 64, 1), nn.BatchNorm2d(128)
        self.conv2 = nn.Conv2d(128, 64, 1)

    def forward(self, x):
        joined = torch.cat([x, self.conv1(x)], 1)
        return self.conv2(torch.relu(self.norm(joined))).sum()


def test_a_concatenation_is_allocated_by_its_first_slice_and_never_written_over():
    # Inductor writes both inputs straight into their slices of the (8, 128, 128, 128)
    # concatenation (64 MiB, fresh every call), allocated by the kernel copying the first;
    # the batch norm reads it and writes a buffer of its own (decide_inplace_update never
    # writes over a concatenation's result: 64 MiB more). With the convolutions' 32 MiB
    # results: 192 MiB and 4 pages a call, what the kernel counts (ru_minflt) for this
    # module on this machine; writing the norm over the concatenation would say 128 MiB.
    g = fxroof.analyze(_DenseLayer().eval(), torch.randn(8, 64, 128, 128), compiled=True,
                       memory_format="channels_last")
    faulted = {r["name"]: r["faulted_bytes"] for r in g.records() if r["faulted_bytes"]}
    assert sorted(faulted.values()) == [32 * MIB + PAGE] * 2 + [64 * MIB + PAGE] * 2
    (holder,) = [name for name, b in faulted.items() if b == 64 * MIB + PAGE and "cat" in name]
    assert list(faulted).index(holder) == 1  # right after the first convolution
