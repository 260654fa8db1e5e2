"""The page-fault pass: glibc's main arena replayed (fxroof.heap), the step's allocation events
(fxroof.page_faults), and the time model reading the replayed faults.

Expected bytes are derived by hand from the rules of mallopt(3) / malloc.c that fxroof.heap
states: sizes are rounded up to 64 bytes after 16 bytes of overhead, mappings and the heap's
touched end to 4096-byte pages; both thresholds start at 128 KiB, the top pad is 128 KiB.
"""
import pytest
import torch
from torch import nn

from fxroof import analyze, calibration as cal, heap, hidden_bytes, prediction
from fxroof.chips import parse_chip
from fxroof.errors import UsageError
from fxroof.time_model import node_time

MIB = 2 ** 20
PAGE = 4096
TOP_PAD = 128 * 1024


def _step(*sizes):
    """Allocate blocks of these sizes in order, then free them in order."""
    return ([("alloc", i, n) for i, n in enumerate(sizes)]
            + [("free", i) for i in range(len(sizes))])


def test_a_block_below_the_maximum_threshold_is_mapped_once_then_reused():
    # call 1: 1 MiB + 64 >= 128 KiB and no heap yet: an mmap of 1 MiB + 4 KiB, all faulted;
    # freeing it raises the mmap threshold to 1 MiB + 4 KiB (trim: twice that).
    # call 2: below the threshold now: the heap grows, its first 1 MiB + 4 KiB fault.
    # freed: the top (1 MiB + 4 KiB + pad) is under the trim threshold: kept.
    # call 3: the same heap pages again, already resident: nothing faults.
    assert heap.steady_faults(_step(MIB), calls=1) == {0: MIB + PAGE}
    assert heap.steady_faults(_step(MIB), calls=2) == {0: MIB + PAGE}
    assert heap.steady_faults(_step(MIB), calls=3) == {0: 0}


def test_a_block_above_32_mib_faults_every_call():
    # the dynamic threshold stops at 32 MiB: 64 MiB is mapped afresh each call
    assert heap.steady_faults(_step(64 * MIB), calls=4) == {0: 64 * MIB + PAGE}


def test_a_trimmed_top_faults_again_every_call():
    # two 1 MiB blocks: from call 2 on they fill the heap's first 2 MiB + 128 bytes; freed,
    # the top reaches 2 MiB + 132 KiB >= the trim threshold (2 MiB + 8 KiB), so all but the
    # 128 KiB pad goes back to the kernel. Each later call faults the first block's pages
    # above the pad (1 MiB + 4 KiB - 128 KiB) and all of the second's (1 MiB: its pages run
    # from 1 MiB + 4 KiB to 2 MiB + 4 KiB).
    assert heap.steady_faults(_step(MIB, MIB), calls=4) == {0: MIB + PAGE - TOP_PAD, 1: MIB}


def test_a_block_pinned_above_the_step_keeps_its_memory_in_the_heap():
    # four 64 KiB blocks (65,600 bytes each with overhead) come from the heap: 262,400 bytes,
    # resident to 266,240 (65 pages). Freed, they reach the top, 397,312 - 0 >= the 128 KiB
    # trim threshold: trimmed to the 128 KiB pad, so every later call faults the pages from
    # 131,072 to 266,240 again: 4 KiB in block 1 (its last page), all of blocks 2 and 3.
    blocks = [64 * 1024] * 4
    allocs = [("alloc", i, n) for i, n in enumerate(blocks)]
    frees = [("free", i) for i in range(len(blocks))]
    assert heap.steady_faults(allocs + frees) == {0: 0, 1: PAGE, 2: 65536, 3: 65536}
    # a block the first call leaves above them (a library's state made at that moment): the
    # freed blocks coalesce under it, never into the top, nothing is trimmed, and later calls
    # take them back from the free chunk without a fault
    pinned = allocs + [("pin", "state", 64)] + frees
    assert heap.steady_faults(pinned) == {0: 0, 1: 0, 2: 0, 3: 0}


def test_a_freed_chunk_in_the_middle_is_reused_best_fit():
    arena = heap.MainArena(mmap_threshold=32 * MIB, trim_threshold=64 * MIB)
    assert arena.malloc("a", MIB) == MIB + PAGE           # the heap's first pages
    assert arena.malloc("b", MIB) == MIB                   # the next ones
    arena.free("a")                                        # a hole below b, not the top
    assert arena.malloc("c", MIB // 2) == 0                # fits in the hole: resident


class _MulRelu(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2)


def test_the_pass_replays_a_step_and_charges_each_node():
    # x (1 MiB, an input) stays; mul allocates 1 MiB, relu 1 MiB (the output, freed when
    # the step ends), mul's freed after relu: the two-block case above -- mul's node faults
    # 1 MiB + 4 KiB - 128 KiB, relu's 1 MiB, every call.
    g = analyze(_MulRelu(), torch.empty(MIB // 4))
    faults = {r["op"]: r["faulted_bytes"] for r in g.records()}
    assert faults == {"mul": MIB + PAGE - TOP_PAD, "relu": MIB}


def test_an_nchw_convolution_replays_oneDNN_blocked_copies():
    conv = nn.Conv2d(16, 32, 3, padding=1, bias=False)
    record = next(r for r in analyze(conv, torch.empty(2, 16, 8, 8)).records()
                  if r["op"] == "convolution")
    x, w, y = 4 * 2 * 16 * 8 * 8, 4 * 32 * 16 * 3 * 3, 4 * 2 * 32 * 8 * 8
    assert hidden_bytes.scratch_buffers(record) == [x, w, y]
    assert hidden_bytes.scratch_buffers({**record, "layout": "channels_last"}) == [w]


def test_a_training_step_allocates_each_key_once():
    # forward, backward and optimizer graphs name their nodes independently (a training
    # step's graphs share names such as "getitem"): each allocation must be its own event
    from fxroof.page_faults import step_events

    g = analyze(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3)),
                torch.empty(2, 3, 16, 16), optimizer="adam")
    events, owner = step_events(g.capture)
    allocated = [e[1] for e in events if e[0] == "alloc"]
    assert len(allocated) == len(set(allocated))
    assert all(e[1] in owner for e in events if e[0] == "alloc")


def test_a_training_step_is_pinned_once_where_its_backward_starts():
    from fxroof.keys import BACKWARD, ORIGIN
    from fxroof.page_faults import step_events

    model, x = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()), torch.empty(2, 3, 16, 16)
    events, owner = step_events(analyze(model, x, backward=True).capture)
    (at,) = [i for i, e in enumerate(events) if e[0] == "pin"]
    phases = [owner[e[1]].meta[ORIGIN].phase == BACKWARD for e in events if e[0] == "alloc"]
    before = sum(e[0] == "alloc" for e in events[:at])
    assert not any(phases[:before]) and all(phases[before:])
    inference, _ = step_events(analyze(model, x).capture)
    assert not any(e[0] == "pin" for e in inference)


def test_a_caching_allocator_faults_nothing_and_saves_the_first_touch_time():
    # the same step as above under a caching allocator (tcmalloc; glibc with its thresholds
    # set high): freed pages stay in the process, so neither node faults once warm, and
    # the step is cheaper by exactly the 2 MiB + 4 KiB - 128 KiB glibc faulted, at 1e9 B/s
    glibc = analyze(_MulRelu(), torch.empty(MIB // 4))
    caching = analyze(_MulRelu(), torch.empty(MIB // 4), allocator="caching")
    assert {r["op"]: r["faulted_bytes"] for r in caching.records()} == {"mul": 0, "relu": 0}
    assert (glibc.model.allocator, caching.model.allocator) == ("glibc", "caching")
    chip = _cpu_chip()
    saved = sum(node_time(r, chip).predicted_s for r in glibc.records()) - \
        sum(node_time(r, chip).predicted_s for r in caching.records())
    assert saved == pytest.approx((2 * MIB + PAGE - TOP_PAD) / 1e9)
    # predict says how much of the step is faults: all of what the caching allocator saves
    assert prediction.predict(glibc.records(), chip)["overall"]["faults_s"] == pytest.approx(saved)
    assert prediction.predict(caching.records(), chip)["overall"]["faults_s"] == 0


def test_fault_seconds_are_the_first_touch_of_the_ops_and_its_reorders_buffers():
    params = cal.Params(t0=0.0, compute=1.0, memory=1.0, fresh_rate=1e9)
    assert cal.fault_seconds(params, 1e6, 5e5) == pytest.approx(1e-3)  # no reorders priced
    reordering = cal.Params(t0=0.0, compute=1.0, memory=1.0, fresh_rate=1e9, layout_rate=1e10)
    assert cal.fault_seconds(reordering, 1e6, 5e5) == pytest.approx(1.5e-3)
    assert cal.fault_seconds(cal.Params(t0=0.0, compute=1.0, memory=1.0), 1e6, 5e5) == 0


def test_an_unknown_allocator_is_refused_in_one_paragraph():
    with pytest.raises(UsageError, match="Unknown allocator 'jemalloc'.*'glibc' or 'caching'"):
        analyze(_MulRelu(), torch.empty(MIB // 4), allocator="jemalloc")


def test_a_cuda_target_records_no_faults():
    g = analyze(_MulRelu(), torch.empty(MIB // 4), device="cuda")
    assert {r["faulted_bytes"] for r in g.records()} == {None}


def _cpu_chip():
    params = {"t0": 0.0, "compute": 1.0, "memory": 1.0, "band": [1, 1], "fresh_rate": 1e9}
    return parse_chip({"id": "cpu-x", "name": "a CPU", "class": "cpu", "vendor": "",
                       "peaks": {"fp32": {"value": 1e12, "unit": "matrix"}},
                       "bandwidth": {"value": 1e10},
                       "calibration": {"elementwise": params}}, "(test)")


def test_the_time_model_prices_the_replayed_faults_at_the_first_touch_rate():
    record = next(r for r in analyze(_MulRelu(), torch.empty(MIB // 4)).records()
                  if r["op"] == "relu")
    chip = _cpu_chip()
    base = node_time({**record, "faulted_bytes": 0}, chip).predicted_s
    # 1 MiB faulted in at 1e9 B/s: 1.048576 ms more
    assert node_time(record, chip).predicted_s - base == pytest.approx(MIB / 1e9)
    # a record without a replay (a compiled kernel, an older cache) falls back to the
    # isolated node's rule: an output under 32 MiB faults nothing
    assert node_time({**record, "faulted_bytes": None}, chip).predicted_s == \
        pytest.approx(base)
