"""The roofline pass and a step's predicted time.

``place`` writes on every costed node of an annotated graph where it sits under a chip's roof
(fxroof.roofline) and its expected time with its band (fxroof.time_model); ``predict`` sums
those per phase: on a CPU a phase takes the sum of its nodes' times, on an accelerator the
host issues each op while the device runs the ones before it (fxroof.pipeline).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from fxroof import op_classes
from fxroof.chips import Chip, resolve_chip
from fxroof.keys import ROOF
from fxroof.pipeline import AUTOGRAD_HOST_FACTOR, KERNEL_FLOOR_S, pipelined_s
from fxroof.roofline import NodeRoof, check_roof, node_roof
from fxroof.time_model import NodeTime, node_time


# Where a predicted time goes (predict's "parts", seconds summing to its predicted_s):
# * roof_s: each node's roof, max(FLOPs / peak, bytes / bandwidth);
# * fitted_rates_s: its kernel at the time model's fitted rates (efficiency, tile waves,
#   second passes over memory) beyond the roof -- below 0 where a fitted rate passes the
#   roof's (cuDNN's Winograd kernels do fewer multiplies than the FLOPs counted; a CPU's
#   caches stream small tensors faster than its measured memory bandwidth);
# * launch_bound_s: kernels their launch geometry or unaligned operands hold back, beyond
#   their fitted time (fxroof.launch_geometry);
# * extra_work_s: work the nodes' counted bytes do not show: cuDNN's layout transposes, a
#   convolution's bias kernels, ATen's copies, a reduction's partial sums, a layer norm's
#   weight-gradient kernel, a CPU's layout reorders, im2col copies and page faults;
# * fixed_cost_s: the rest, per-op fixed costs: on an accelerator the time the device waits
#   for the host to issue work and its floor per kernel, on a CPU each op's dispatch.
TIME_PARTS = ("roof_s", "fitted_rates_s", "launch_bound_s", "extra_work_s", "fixed_cost_s")
_NO_PARTS = (0.0,) * (len(TIME_PARTS) - 1)


def predict(records: list[dict], chip: Chip, roof: str = "calibrated") -> dict:
    """Predicted time per phase and in all (s) with its band and the roof time, the
    compute-bound share of the roof time, and ``faults_s``: how much of the predicted time
    is page faults (a CPU with glibc's malloc; 0 with a caching allocator or on a GPU). On
    a CPU a phase takes the sum of its nodes' times; on an accelerator the host issues each
    op while the device runs the ones before it (fxroof.pipeline), so a phase takes less
    than that sum where host and kernel times are alike, and ``host_wait_s`` says how much
    of it the device waits for the host; "overall" is the sum of the phases either way."""
    check_roof(roof)
    result: dict = {}
    issued: dict[str, list[NodeTime]] = {}
    for r in records:
        bounds = node_roof(r, chip)
        timed = node_time(r, chip, roof, bounds)
        issued.setdefault(r["phase"], []).append(timed)
        for phase in (r["phase"], "overall"):
            p = result.setdefault(phase, {"predicted_s": 0.0, "low_s": 0.0, "high_s": 0.0,
                                          "ideal_s": 0.0, "compute_bound_s": 0.0,
                                          "faults_s": 0.0, "flops": 0, "bytes": 0,
                                          "model": "ideal"})
            p["predicted_s"] += timed.predicted_s
            p["parts"] = [a + b for a, b in zip(p.get("parts", _NO_PARTS), node_parts(timed))]
            p["faults_s"] += timed.faults_s
            p["low_s"] += timed.low_s
            p["high_s"] += timed.high_s
            p["ideal_s"] += timed.ideal_s
            p["compute_bound_s"] += timed.ideal_s if bounds.bound == "compute" else 0.0
            p["flops"] += r["flops"]
            p["bytes"] += r["bytes"]
            if timed.model == "calibrated":
                p["model"] = "calibrated"
    if chip.cls != "cpu" and any(t.host_s for times in issued.values() for t in times):
        # a time model with host costs (the roof has none); a compiled step's backward is one
        # autograd node running Inductor's kernels, not an engine call per op
        eager = not any(op_classes.compiled_kernel(r) for r in records)
        _overlap_host(result, issued, autograd=eager)
    for p in result.values():
        p["parts"] = dict(zip(TIME_PARTS, [*p["parts"], p["predicted_s"] - sum(p["parts"])]))
        p["intensity"] = p["flops"] / p["bytes"] if p["bytes"] else None
        p["bound"] = "compute" if p["compute_bound_s"] >= p["ideal_s"] / 2 else "memory"
    return result


def node_parts(t: NodeTime) -> tuple:
    """A node's share of TIME_PARTS but the last (the fixed costs, which the step's pipeline
    sets): its device time split into roof, fitted rates, launch bound and extra work; a
    node the roof alone prices puts it all in the roof."""
    if t.model != "calibrated":
        return t.predicted_s, 0.0, 0.0, 0.0
    return t.roof_s, t.kernel_s - t.roof_s - t.launch_s - t.extra_s, t.launch_s, t.extra_s


def _overlap_host(result: dict, issued: dict[str, list[NodeTime]],
                  autograd: bool = True) -> None:
    """Replace each phase's summed expectation and band by the pipelined step's, and add
    ``host_wait_s``: how long the device sits idle waiting for the host to issue work (the
    step less its kernels) -- most of a small batch's step, which more FLOP/s would not
    shorten but fewer launches (torch.compile, CUDA graphs) would. ``autograd``: a training
    step's host costs carry the autograd engine's (AUTOGRAD_HOST_FACTOR)."""
    overall = result["overall"]
    for key in ("predicted_s", "low_s", "high_s", "host_wait_s"):
        overall[key] = 0.0
    host_scale = AUTOGRAD_HOST_FACTOR if autograd and "backward" in issued else 1.0
    for phase, times in issued.items():
        for key in ("predicted_s", "low_s", "high_s"):
            seconds = pipelined_phase_s(times, key, host_scale)
            result[phase][key] = seconds
            overall[key] += seconds
        kernels = sum(device_seconds(t) for t in times)
        result[phase]["host_wait_s"] = result[phase]["predicted_s"] - kernels
        overall["host_wait_s"] += result[phase]["host_wait_s"]


def pipelined_phase_s(times: list[NodeTime], key: str = "predicted_s",
                      host_scale: float = 1.0) -> float:
    """Seconds of one phase's nodes issued in order and pipelined (fxroof.pipeline), each at
    its expectation or band edge ``key``, its host cost times ``host_scale``."""
    return pipelined_s((host * host_scale, kernel)
                       for host, kernel in (_host_and_kernel(t, key) for t in times))


def device_seconds(t: NodeTime) -> float:
    """The device's part of a node's expected time (what events around its kernel time): the
    kernel, at least the device's floor, where the time model gives it a host cost; all of
    it where it has none (the roof, a CPU's model)."""
    return _host_and_kernel(t, "predicted_s")[1]


_BAND_EDGES = {"low_s": 0, "high_s": 1}


def _host_and_kernel(t: NodeTime, key: str) -> tuple[float, float]:
    """(host s, kernel s) of a node at its expectation or band edge ``key``: the kernel
    scaled as the node's isolated time, the host as its own band says where it has one,
    else as the kernel; a calibrated kernel lasts at least the device's floor per kernel."""
    seconds = getattr(t, key)
    if not t.host_s:
        return 0.0, seconds
    scale = seconds / t.predicted_s
    edge = _BAND_EDGES.get(key)
    host_scale = t.host_band[edge] if t.host_band and edge is not None else scale
    return t.host_s * host_scale, max(t.kernel_s * scale, KERNEL_FLOOR_S)


def fields(roof: NodeRoof, time: NodeTime, timed: Optional[float]) -> dict:
    """What a node record gains on a chip: attainable FLOP/s and bound (the roof), the
    predicted time with its band and the roof time, and when it was timed, the fraction of
    the roof it reached (roof time / measured time) and the time above the roof (measured -
    roof time, seconds)."""
    return {"attainable_flops_per_s": roof.attainable, "bound": roof.bound,
            "ideal_s": time.ideal_s, "predicted_s": time.predicted_s, "low_s": time.low_s,
            "high_s": time.high_s, "time_model": time.model,
            "fraction_of_roof": time.ideal_s / timed if timed else None,
            "gap_s": max(timed - time.ideal_s, 0.0) if timed is not None else None}


class Placement(NamedTuple):
    """What the roofline pass writes into node.meta[ROOF]."""

    roof: NodeRoof
    time: NodeTime


def roof_fields(record: dict, chip: Chip, roof: str = "calibrated") -> dict:
    bounds = node_roof(record, chip)
    return fields(bounds, node_time(record, chip, roof, bounds), record.get("time_s"))


def place(graph, chip, roof: str = "calibrated") -> dict:
    """The roofline pass: write ``node.meta[ROOF]`` (a Placement on ``chip``) on every costed
    node of an AnnotatedGraph, whose records then carry the roof fields; returns the
    predicted time per phase. ``chip``: a Chip or a chip id."""
    check_roof(roof)
    chip = resolve_chip(chip)
    records = graph.records()
    for node, record in zip(graph.nodes(), records, strict=True):
        bounds = node_roof(record, chip)
        node.meta[ROOF] = Placement(bounds, node_time(record, chip, roof, bounds))
    graph.chip = chip
    return predict(records, chip, roof)


def where_to_look(records: list[dict], chip: Chip, top: int = 10) -> list[dict]:
    """Timed nodes ranked by time x distance from their roof: the time that would be saved if
    each ran at its attainable FLOP/s or bandwidth (measured - predicted, seconds)."""
    rows = [{**r, **roof_fields(r, chip)} for r in records if r.get("time_s") is not None]
    rows.sort(key=lambda row: -row["gap_s"])
    return rows[:top]
