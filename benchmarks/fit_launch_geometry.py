"""Fit fxroof.launch_geometry's constants (and roofline's NARROW_CONV_COMPUTE and
CUDNN_DEPTHWISE_COMPUTE) on a GPU's per-node profiles, and say how well the shipped ones
predict each node.

    python benchmarks/fit_launch_geometry.py benchmarks/measured/h100-profile-*.json
                                             --chip h100_sxm [--json out.json] [--force]

Each file is `fxroof profile ... --device cuda --json` output of a GPU-bound step: its
nodes' CUDA-event times are the kernels' (gpu_classes.read_profile refuses one whose nodes
outlast the eager step). The timing pass runs the graph's own ATen ops, so its batch norms
are ATen's kernels whatever their dtype -- the kernels the constants describe. Per kernel
kind, on ``--chip``'s SMs and compute capability:

* eval batch norm (``batch_norm_transform_s``): ITERATION_LATENCY_S, the median seconds a
  wave of round trips over the nodes the shipped constants call latency-bound, and
  BLOCK_ISSUE_S, the median seconds a block per SM over the others;
* training batch norm: STATISTICS_ITERATION_S and BACKWARD_REDUCTION_ITERATION_S, the
  median of (node - its transform) per wave of round trips over nodes of 128 trips or more
  (fewer are fixed costs, not trips); the backward's bound is its sums alone
  (launch_geometry.bound_s), so there measured / bound exceeds 1 by the elementwise pass;
* pooling: POOL_OUTPUT_S, the median seconds an element per SM;
* an NCHW adaptive pooling (a block of 8 warps per plane): the seconds a warp per SM it
  implies, the median -- a check of WARP_ISSUE_S, which ships as the eval batch norm's
  BLOCK_ISSUE_S over its blocks' two warps, not fitted on these nodes;
* layer norm: LAYER_NORM_ROW_S and LAYER_NORM_ELEMENT_S, least squares of the seconds a
  row per SM on the row's width, over LAYER_NORM_FIT_MODELS' nodes of two waves of rows or
  more (one point per shape);
* an NCHW depthwise convolution of fp32 or bf16 (ATen's kernels): DEPTHWISE_OUTPUT_S and
  DEPTHWISE_TAP_S, least squares (relative) of its seconds per SM on its outputs and
  multiply-adds; its backward's DEPTHWISE_INPUT_GRAD_S and DEPTHWISE_WEIGHT_GRAD_S, on its
  input-gradient elements and multiply-adds;
* a mean or sum over the innermost dimensions (op_classes.row_reduction):
  REDUCTION_ROW_S and REDUCTION_BYTE_S, least squares (relative) of its seconds per SM on
  its rows and the bytes it reads, over ROW_REDUCTION_FIT_MODELS' nodes;
* a copy that runs the strided loop (``copy[strided]``): no constant, a check of the
  elementwise loops' (COPY_LOOP);
* an elementwise op that runs ATen's legacy or casting loop (op_classes.elementwise_loop):
  LOOP_ELEMENT_S per kind and LOOP_BYTE_S, least squares (relative) of its seconds per SM on
  its elements, by kind, and the bytes it moves, over LOOP_FIT_MODELS' nodes of
  MIN_LOOP_ELEMENTS or more. Each profile is traced again on fake tensors as it was
  profiled (the kept ones predate the loops' names), and its nodes take the rules' names
  from the nodes of the same name, op and shape (with_todays_rules);
* a sum or mean over the outer dimensions (op_classes.column_reduction: a bias gradient):
  PARTIAL_TRIP_S and GLOBAL_REDUCE_FIXED_S, least squares (relative) of the node's time
  less its class's (its bytes) on the round trips of the block that combines the others
  (launch_geometry.column_reduction_blocks), over COLUMN_FIT_MODELS' nodes whose rows
  are split across blocks; re-traced as the loops are;
* a narrow convolution, and a channels-last depthwise one or its backward (cuDNN's:
  op_classes.cudnn_depthwise), one key per op and dtype: its share of the FP32 peak per
  node (each shipped constant is the median over the nodes of the H100's and the H200's
  profiles; run once per chip).

A pooling, layer-norm or depthwise node's time is counted in the SM's cycles
(launch_geometry.CLOCKED_KINDS): it is taken to the reference boards' clock first (x the
chip's SM clock / REFERENCE_CLOCK_HZ; 1 on an H100 or H200), so the constants fitted are
the ones the module ships. Then every node's measured / predicted under the shipped
constants, and each constant fitted again leaving each model out.
"""
from __future__ import annotations

import math
import os
import statistics
import sys
from collections import defaultdict

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import parsed_chip_arguments, script_main  # noqa: E402
from benchmarks.gpu_classes import read_traced_profile, with_todays_rules  # noqa: E402,F401
from fxroof import chip_params, hidden_kernels, launch_geometry as lg  # noqa: E402
from fxroof import op_classes, prediction, time_model  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import write_json  # noqa: E402

MIN_REDUCTION_TRIPS = 128
# A layer norm of fewer rows than two waves of blocks (16 of 128 threads an SM) is one
# block's latency, not a row rate: ConvNeXt's last, 256 rows, took 7 us
MIN_LAYER_NORM_ROWS_PER_SM = 32
# vit_b_16's layer norms read a bf16 input that autocast casts to fp32 first, and took 1.6x
# the rows of ConvNeXt's; kept as a check, not fitted
LAYER_NORM_FIT_MODELS = ("convnext_tiny",)
# The reductions fitted on: EfficientNet-B0's SE and pool means span rows of 49 to 12,544
# elements in fp32 and bf16; the other models' one global pool each is kept as a check
ROW_REDUCTION_FIT_MODELS = ("efficientnet_b0",)
# The elementwise loops fitted on: EfficientNet-B0's SE scales, ConvNeXt-T's layer scales and
# ViT-B/16's bias and residual adds; the b64 training profiles of ResNet-50 and MobileNetV2
# hold one such node each, a global pool's backward just after the classifier, where the
# GPU starves and the events hold the host's launch (the reductions' note above)
LOOP_FIT_MODELS = ("efficientnet_b0", "convnext_tiny", "vit_b_16")
# Fewer elements than a wave of the legacy kernel's blocks on every SM many times over
# (128 threads of 2-4 elements) are a launch, not a rate
MIN_LOOP_ELEMENTS = 1_000_000
ELEMENTWISE_LOOP = "elementwise loop"  # gather's key of the loops' nodes
# ... and of the copies that run those loops (a transposing clone: op_costs.data_movement's
# copy[strided]), kept as a check of the elementwise fit, not fitted on
COPY_LOOP = "copy loop"
# The column reductions fitted on: the bias gradients of ConvNeXt-T's training step (fp32,
# H200; 8 shapes, 96 to 3072 columns of 3136 to 200704 rows, 13 to 196 round trips); ViT's
# (3 shapes of 22 to 25 trips, which cannot tell a trip from the fixed cost) are a check
COLUMN_FIT_MODELS = ("convnext_tiny",)
GLOBAL_REDUCE = "column reduction"  # gather's key of those nodes
# Profiles kept from before convolutions were named narrow (op_costs.conv.NARROW): their
# 3-channel convolutions, by module
NARROW_MODULES = {("resnet50", "conv1"), ("vit_b_16", "conv_proj")}


def kind_of(record: dict) -> str | None:
    """Which constant a timed node informs (op_classes.launch_kind, whatever its dtype: the
    timing pass ran ATen's kernels), None for none."""
    return op_classes.launch_kind(record) if record.get("time_s") is not None else None


def narrow_conv(record: dict, model: str) -> bool:
    return op_classes.op_class_of(record) in op_classes.CONV_CLASSES and (
        op_classes.narrow(record) or (model, record.get("module")) in NARROW_MODULES)


def gather(profiles: list[dict], chip) -> dict:
    """{kind: [(model, record), ...]} of the nodes each constant reads, a CLOCKED_KINDS
    node's time taken to the reference boards' SM clock (launch_geometry's docstring); the
    elementwise loops' kinds, fitted together, under ELEMENTWISE_LOOP, each record naming
    its own ("kind")."""
    found = defaultdict(list)
    clock = chip_params.sm_clock_hz(chip, _units(chip)) or lg.REFERENCE_CLOCK_HZ
    for profile in profiles:
        for record in profile["nodes"]:
            kind = kind_of(record)
            if kind in lg.CLOCKED_KINDS:
                record = {**record, "time_s": record["time_s"] * clock / lg.REFERENCE_CLOCK_HZ}
            if kind in lg.LOOP_ELEMENT_S:
                key = COPY_LOOP if op_classes.op_class_of(record) == "copy" \
                    else ELEMENTWISE_LOOP
                found[key].append((profile["name"], {**record, "kind": kind}))
            elif kind:
                found[kind].append((profile["name"], record))
            elif op_classes.column_reduction(record) and record.get("time_s"):
                found[GLOBAL_REDUCE].append((profile["name"], record))
            elif narrow_conv(record, profile["name"]) and record.get("time_s"):
                found["narrow"].append((profile["name"], record))
            elif op_classes.cudnn_depthwise(record) and record.get("time_s"):
                found[cudnn_depthwise_key(record)].append((profile["name"], record))
    return found


def cudnn_depthwise_key(record: dict) -> str:
    """The share a channels-last depthwise node informs: one per op and dtype."""
    return f"cudnn depthwise {record['op']} {record['dtype']}"


def _units(chip):
    return chip_params.multiprocessors(chip)


def fit_transform(nodes, chip) -> dict:
    """ITERATION_LATENCY_S and BLOCK_ISSUE_S from eval batch norms."""
    latency, issue = [], []
    for _, r in nodes:
        trips, blocks = lg.transform_geometry(r["shape"], _units(chip), chip.compute_capability)
        bound = trips * lg.ITERATION_LATENCY_S >= blocks * lg.BLOCK_ISSUE_S
        (latency if bound else issue).append(r["time_s"] / (trips if bound else blocks))
    return {"ITERATION_LATENCY_S": statistics.median(latency) if latency else None,
            "BLOCK_ISSUE_S": statistics.median(issue) if issue else None}


def fit_reduction(nodes, chip, name: str) -> dict:
    """A reduction's seconds a round trip: the median of (node - transform) per trip."""
    per_trip = []
    for _, r in nodes:
        trips = lg.reduction_trips(r["shape"], _units(chip), chip.compute_capability)
        transform = lg.batch_norm_transform_s(r["shape"], _units(chip), chip.compute_capability)
        if trips and transform and trips >= MIN_REDUCTION_TRIPS:
            per_trip.append((r["time_s"] - transform) / trips)
    return {name: statistics.median(per_trip) if per_trip else None}


def fit_pool(nodes, chip) -> dict:
    values = [r["time_s"] * _units(chip) / math.prod(r["shape"]) for _, r in nodes]
    return {"POOL_OUTPUT_S": statistics.median(values) if values else None}


def fit_adaptive_pool(nodes, chip) -> dict:
    """The seconds a warp per SM the adaptive poolings took (planes x 8 warps)."""
    values = [r["time_s"] * _units(chip)
              / (math.prod(r["shape"][:-2]) * lg.ADAPTIVE_POOL_WARPS) for _, r in nodes]
    return {"WARP_ISSUE_S (implied; ships as BLOCK_ISSUE_S / 2)":
            statistics.median(values) if values else None}


def fit_layer_norm(nodes, chip) -> dict:
    """Least squares of seconds a row per SM = a + b x width, one point per shape."""
    by_shape = defaultdict(list)
    for model, r in nodes:
        rows = math.prod(r["shape"][:-1])
        if model in LAYER_NORM_FIT_MODELS and rows >= MIN_LAYER_NORM_ROWS_PER_SM * _units(chip):
            by_shape[tuple(r["shape"])].append(r["time_s"])
    if len(by_shape) < 2:
        return {"LAYER_NORM_ROW_S": None, "LAYER_NORM_ELEMENT_S": None}
    widths, per_row = zip(*((shape[-1], statistics.median(times) * _units(chip)
                             / math.prod(shape[:-1])) for shape, times in by_shape.items()))
    slope, intercept = np.polyfit(np.array(widths, float), np.array(per_row), 1)
    return {"LAYER_NORM_ROW_S": float(intercept), "LAYER_NORM_ELEMENT_S": float(slope)}


def _relative_least_squares(columns: list[list[float]], seconds: list[float]) -> list[float]:
    """Coefficients c minimising sum ((columns . c) / seconds - 1)^2: each node's error
    relative to its own time, so the long nodes do not outvote the short ones."""
    a = np.array(columns, float).T / np.array(seconds)[:, None]
    return [float(c) for c in np.linalg.lstsq(a, np.ones(len(seconds)), rcond=None)[0]]


def _fit_per_sm(nodes, chip, names: tuple, second: str) -> dict:
    """``names`` (per element, per unit of ``second``): seconds per SM = elements x a +
    record[second] x b, the elements being each node's output (a backward's input
    gradient; a reduction's rows)."""
    units = _units(chip)
    fitted = _relative_least_squares([[math.prod(r["shape"]) / units for _, r in nodes],
                                      [r[second] / units for _, r in nodes]],
                                     [r["time_s"] for _, r in nodes])
    return dict(zip(names, fitted))


def fit_depthwise(nodes, chip) -> dict:
    """DEPTHWISE_OUTPUT_S and DEPTHWISE_TAP_S (the MACs are outputs x taps). Nodes of one
    kernel size alone cannot tell the two apart."""
    names = ("DEPTHWISE_OUTPUT_S", "DEPTHWISE_TAP_S")
    if len({round(r["macs"] / math.prod(r["shape"])) for _, r in nodes}) < 2:
        return dict.fromkeys(names)
    return _fit_per_sm(nodes, chip, names, "macs")


def fit_depthwise_backward(nodes, chip) -> dict:
    """DEPTHWISE_INPUT_GRAD_S and DEPTHWISE_WEIGHT_GRAD_S, on input-gradient elements."""
    return _fit_per_sm(nodes, chip, ("DEPTHWISE_INPUT_GRAD_S", "DEPTHWISE_WEIGHT_GRAD_S"),
                       "macs")


def fit_elementwise_loops(nodes, chip) -> dict:
    """LOOP_ELEMENT_S of each kind and LOOP_BYTE_S: one least squares (relative) over every
    kind's nodes of LOOP_FIT_MODELS and MIN_LOOP_ELEMENTS or more, seconds per SM =
    elements x (the node's kind's constant) + bytes moved x LOOP_BYTE_S; a kind no node
    informs is None."""
    fitted = [(m, r) for m, r in nodes
              if m in LOOP_FIT_MODELS and math.prod(r["shape"]) >= MIN_LOOP_ELEMENTS]
    kinds = [k for k in lg.LOOP_ELEMENT_S if any(r["kind"] == k for _, r in fitted)]
    if not kinds or len(fitted) <= len(kinds):
        return {"LOOP_ELEMENT_S": None, "LOOP_BYTE_S": None}
    units = _units(chip)
    columns = [[math.prod(r["shape"]) / units * (r["kind"] == k) for _, r in fitted]
               for k in kinds] + [[r["bytes"] / units for _, r in fitted]]
    *per_element, per_byte = _relative_least_squares(columns, [r["time_s"] for _, r in fitted])
    return {"LOOP_ELEMENT_S": dict(zip(kinds, per_element)), "LOOP_BYTE_S": per_byte}


def class_seconds(record: dict, chip) -> float:
    """A node's device seconds on ``chip`` as its class prices its bytes, without the
    combining of blocks (its rule's variant dropped)."""
    rule = record["rule"].removesuffix(op_classes.COLUMNS_VARIANT)
    return prediction.device_seconds(time_model.node_time({**record, "rule": rule}, chip))


def combining_trips(record: dict, chip) -> int:
    """The round trips of the block that combines a column reduction's others (0: none)."""
    rows, columns = op_classes.column_reduction(record)
    blocks, height = lg.column_reduction_blocks(
        rows, columns, _units(chip), lg.RESIDENT[tuple(chip.compute_capability)][0])
    return math.ceil(blocks / height) if blocks > 1 else 0


def fit_global_reduce(nodes, chip) -> dict:
    """PARTIAL_TRIP_S and GLOBAL_REDUCE_FIXED_S: least squares of (class seconds + trips x a
    + b) / seconds on 1, one point per shape (its nodes' median time: a layer repeated nine
    times does not outvote one seen once), over COLUMN_FIT_MODELS' nodes whose rows are
    split across blocks; None where fewer than two trip counts inform them."""
    names = ("PARTIAL_TRIP_S", "GLOBAL_REDUCE_FIXED_S")
    by_shape = defaultdict(list)
    for model, r in nodes:
        if model in COLUMN_FIT_MODELS and combining_trips(r, chip):
            by_shape[op_classes.column_reduction(r)].append(r)
    if len({combining_trips(found[0], chip) for found in by_shape.values()}) < 2:
        return dict.fromkeys(names)
    seconds = np.array([statistics.median(r["time_s"] for r in found)
                        for found in by_shape.values()])
    a = np.array([[combining_trips(found[0], chip), 1.0]
                  for found in by_shape.values()]) / seconds[:, None]
    rest = 1 - np.array([class_seconds(found[0], chip) for found in by_shape.values()]) / seconds
    return dict(zip(names, (float(c) for c in np.linalg.lstsq(a, rest, rcond=None)[0])))


def fit_row_reduction(nodes, chip) -> dict:
    """REDUCTION_ROW_S and REDUCTION_BYTE_S: least squares (relative) of seconds per SM on
    the rows (outputs) and the bytes read, over ROW_REDUCTION_FIT_MODELS' nodes."""
    names = ("REDUCTION_ROW_S", "REDUCTION_BYTE_S")
    fitted = [(m, r) for m, r in nodes if m in ROW_REDUCTION_FIT_MODELS]
    if len({r["bytes_read"] // math.prod(r["shape"]) for _, r in fitted}) < 2:
        return dict.fromkeys(names)  # one row width cannot tell the two apart
    return _fit_per_sm(fitted, chip, names, "bytes_read")


def fp32_shares(nodes, chip) -> list[float]:
    """Each node's FLOP/s over the chip's FP32 peak, its time less the bias add ATen runs
    after a cuDNN convolution (hidden_kernels.bias_add_s: a kernel of its own, priced apart)."""
    return [r["flops"] / (r["time_s"] - hidden_kernels.bias_add_s(r, chip)) / chip.peaks["fp32"]
            for _, r in nodes]


# The convolutions priced at a share of the FP32 peak, and the shipped share
SHARES = {"narrow": time_model.NARROW_CONV_COMPUTE,
          **{cudnn_depthwise_key({"op": op, "dtype": dtype}): share
             for (op, dtype), share in time_model.CUDNN_DEPTHWISE_COMPUTE.items()}}
FITS = {"bn_eval": fit_transform,
        "bn_train": lambda n, c: fit_reduction(n, c, "STATISTICS_ITERATION_S"),
        "bn_backward": lambda n, c: fit_reduction(n, c, "BACKWARD_REDUCTION_ITERATION_S"),
        "pool": fit_pool, "adaptive_pool": fit_adaptive_pool, "layer_norm": fit_layer_norm,
        "dw_conv": fit_depthwise,
        "dw_conv_backward": fit_depthwise_backward, "row_reduction": fit_row_reduction,
        ELEMENTWISE_LOOP: fit_elementwise_loops, COPY_LOOP: lambda nodes, chip: {},
        GLOBAL_REDUCE: fit_global_reduce}


def shipped_ratio(kind: str, record: dict, chip) -> float | None:
    """measured / the shipped bound (launch_geometry.bound_s) for one node; a column
    reduction's, measured / its class's seconds and the combining of its blocks."""
    if kind == GLOBAL_REDUCE:
        return record["time_s"] / prediction.device_seconds(time_model.node_time(record, chip))
    bound = lg.bound_s(record.get("kind", kind), record["shape"], _units(chip),
                       chip.compute_capability, record.get("macs") or 0.0,
                       read_bytes=record.get("bytes_read") or 0.0,
                       moved_bytes=record.get("bytes") or 0.0)
    return record["time_s"] / bound if bound else None


def summary(found: dict, chip) -> dict:
    result = {}
    for kind, nodes in sorted(found.items()):
        if kind not in FITS:  # a share: the narrow or a cuDNN depthwise convolution
            shares = fp32_shares(nodes, chip)
            result[kind] = {"nodes": len(nodes), "shares": [round(s, 4) for s in shares],
                            "median_share": round(statistics.median(shares), 4),
                            "shipped": SHARES.get(kind)}
            continue
        ratios = [x for x in (shipped_ratio(kind, r, chip) for _, r in nodes) if x]
        models = sorted({m for m, _ in nodes})
        by_model = {m: round(statistics.median(x for x in (shipped_ratio(kind, r, chip)
                                                           for mm, r in nodes if mm == m)
                                               if x), 3) for m in models}
        left_out = {m: FITS[kind]([n for n in nodes if n[0] != m], chip) for m in models} \
            if len(models) > 1 else {}
        result[kind] = {
            "nodes": len(nodes), "fitted": FITS[kind](nodes, chip),
            "shipped_measured_over_bound": {
                "median": round(statistics.median(ratios), 3) if ratios else None,
                "p10": round(float(np.percentile(ratios, 10)), 3) if ratios else None,
                "p90": round(float(np.percentile(ratios, 90)), 3) if ratios else None,
                "median_by_model": by_model},
            "leave_one_model_out": left_out}
    return result


def main(argv=None) -> int:
    args, chip = parsed_chip_arguments(__doc__, "profiles",
                                       "`fxroof profile --json` files of a GPU", argv)
    if chip.cls != "gpu" or not _units(chip) or \
            tuple(chip.compute_capability or ()) not in lg.RESIDENT:
        raise FxroofError(f"Chip '{chip.id}' is not an NVIDIA GPU whose SMs and compute "
                          "capability fxroof knows, which the launch-geometry bounds need: "
                          "name one (h100_sxm, h200_sxm, a100_sxm_80gb, ...) or a measured "
                          "chip from `fxroof chips measure --device cuda`.")
    found = gather([read_traced_profile(path) for path in args.profiles], chip)
    result = {"chip": chip.id, "kinds": summary(found, chip)}
    for kind, entry in result["kinds"].items():
        print(f"{kind}: {entry}")
    if args.json:
        write_json(args.json, result, overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
