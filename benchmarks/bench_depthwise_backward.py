"""Depthwise convolution backward on this CPU: oneDNN's kernels by kernel size, and the time
model's classes for them (benchmarks/README.md, "Depthwise backward").

    python benchmarks/bench_depthwise_backward.py [--chip this-cpu] [--quick]
                                                  [--model mnasnet1_0 --batch 8]
                                                  [--json r.json [--force]]

Grid: for batch 1 and 8, 32-240 channels, 14-112 px, stride 1 and 2, a 3x3 and a 5x5
depthwise ``convolution_backward`` timed alone (the fastest of 5 after 2 warm-up calls):
both gradients, the weight gradient alone, the input gradient alone, and the forward; the
weight gradient's rate (FLOP/s: half the node's count); and fxroof's prediction of the node
on ``--chip``. Prints a line per shape and the 5x5 / 3x3 time ratios. With --model, also a
training step of that torchvision model timed node by node (fxroof's timing pass): measured
and predicted seconds summed per depthwise backward class. Run it as a study's processes
run (`LD_PRELOAD=libtcmalloc_minimal.so.4`) to compare with a chip measured so.
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import script_main  # noqa: E402

import torch  # noqa: E402

from fxroof import analyze, op_classes  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.files import check_writable, write_json  # noqa: E402
from fxroof.probes import _DepthwiseLayer  # noqa: E402
from fxroof.time_model import node_time  # noqa: E402


def fastest(call, repeats: int = 5) -> float:
    call(), call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def grid_point(batch, channels, size, kernel, stride, chip) -> dict:
    layer = _DepthwiseLayer(channels, kernel, stride)
    record = next(r for r in analyze(layer, torch.empty(batch, channels, size, size),
                                     backward=True).records("backward") if op_classes.depthwise(r))
    x = torch.randn(batch, channels, size, size)
    w = layer.conv.weight.detach()
    grad_out = torch.randn_like(layer.conv(x).detach())
    args = (grad_out, x, w, None, layer.conv.stride, layer.conv.padding, layer.conv.dilation,
            False, [0, 0], channels)

    def backward(mask):
        return lambda: torch.ops.aten.convolution_backward(*args, mask)

    point = {"batch": batch, "channels": channels, "size": size, "kernel": kernel,
             "stride": stride, "class": op_classes.op_class_of(record), "flops": record["flops"],
             "both_s": fastest(backward([True, True, False])),
             "weight_s": fastest(backward([False, True, False])),
             "input_s": fastest(backward([True, False, False])),
             "forward_s": fastest(lambda: layer.conv(x)),
             "predicted_s": node_time(record, chip).predicted_s}
    point["weight_flops_per_s"] = record["flops"] / 2 / point["weight_s"]
    return point


def model_classes(model: str, batch: int, chip) -> dict:
    """{class: [measured s, predicted s, nodes]} of the model's depthwise backward nodes."""
    graph = analyze(model, batch=batch, backward=True)
    graph.time("cpu", repeats=5, warmup=2, progress=False)
    sums: dict = {}
    for r in graph.records("backward"):
        backward_conv = op_classes.op_class_of(r) in op_classes.BACKWARD_CONV_CLASSES
        if r["time_s"] is not None and backward_conv:
            entry = sums.setdefault(op_classes.op_class_of(r), [0.0, 0.0, 0])
            entry[0] += r["time_s"]
            entry[1] += node_time(r, chip).predicted_s
            entry[2] += 1
    return sums


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chip", default="this-cpu")
    parser.add_argument("--quick", action="store_true", help="batch 8 and 96 channels only")
    parser.add_argument("--model", help="also time this model's training step node by node")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    if args.json:
        check_writable(args.json, args.force)
    chip = get_chip(args.chip)
    # the model first: a wrong name fails before the grid's minute of timing
    by_class = model_classes(args.model, args.batch, chip) if args.model else None
    shapes = [(b, c, s) for b, c, s in itertools.product((1, 8), (32, 96, 240), (14, 28, 56, 112))
              if 32 * 28 * 28 <= b * c * s * s <= 8 * 96 * 112 * 112
              and (not args.quick or (b, c) == (8, 96))]
    points, ratios = [], []
    for (batch, channels, size), stride in itertools.product(shapes, (1, 2)):
        pair = [grid_point(batch, channels, size, k, stride, chip) for k in (3, 5)]
        for p in pair:
            print(f"b{batch} c{channels:3d} {size:3d}px {p['kernel']}x{p['kernel']}/{stride} "
                  f"{p['class']:18s} both {p['both_s'] * 1e3:7.2f} ms  weight "
                  f"{p['weight_s'] * 1e3:7.2f}  input {p['input_s'] * 1e3:6.2f}  forward "
                  f"{p['forward_s'] * 1e3:6.2f}  predicted {p['predicted_s'] * 1e3:7.2f}  "
                  f"weight gradient {p['weight_flops_per_s'] / 1e9:5.1f} GFLOP/s", flush=True)
        points += pair
        ratios.append(pair[1]["both_s"] / pair[0]["both_s"])
    summary = {"shapes": len(points), "5x5 / 3x3 backward time": {
        "min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}}
    for k in (3, 5):
        rates = [p["weight_flops_per_s"] / 1e9 for p in points if p["kernel"] == k]
        summary[f"{k}x{k} weight gradient GFLOP/s"] = {
            "min": min(rates), "median": statistics.median(rates), "max": max(rates)}
    if by_class is not None:
        summary[f"{args.model} b{args.batch} training, per class"] = {
            c: {"measured_s": m, "predicted_s": p, "nodes": n, "ratio": p / m}
            for c, (m, p, n) in by_class.items()}
    print(summary)
    if args.json:
        write_json(args.json, {"summary": summary, "points": points}, args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
