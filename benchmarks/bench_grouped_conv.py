"""Grouped convolutions on this CPU: time by channels per group, measured and predicted
(benchmarks/README.md, "Grouped convolutions").

    python benchmarks/bench_grouped_conv.py [--chip this-cpu] [--channels 192] [--size 28]
                                            [--batch 8] [--json r.json [--force]]

A 3x3 convolution of --channels channels in and out over a --size x --size map, at every
group width that divides the channels (1: depthwise, the channel count: dense), so the FLOPs
scale with the group width; channels-last and NCHW, each timed alone (the median of 20 after
3 warm-up calls), with its rate (FLOP/s) and fxroof's prediction of the node on --chip
(channels-last grouped convolutions pay for the vector lanes a narrow group leaves idle:
fxroof.op_classes.lane_padding). Measure on an idle machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import script_main  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

from fxroof import analyze  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.files import check_writable, write_json  # noqa: E402
from fxroof.time_model import node_time  # noqa: E402


def median_seconds(call, repeats: int = 20) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def point(channels: int, width: int, size: int, batch: int, memory_format, chip) -> dict:
    layer = nn.Conv2d(channels, channels, 3, padding=1, groups=channels // width, bias=False)
    x = torch.randn(batch, channels, size, size).to(memory_format=memory_format)
    layer = layer.to(memory_format=memory_format)
    record = next(r for r in analyze(layer, x).records() if r["op"] == "convolution")
    with torch.no_grad():
        seconds = median_seconds(lambda: layer(x))
    return {"layout": "channels_last" if memory_format == torch.channels_last else "nchw",
            "channels_per_group": width, "rule": record["rule"], "flops": record["flops"],
            "measured_s": seconds, "flops_per_s": record["flops"] / seconds,
            "predicted_s": node_time(record, chip).predicted_s}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chip", default="this-cpu")
    p.add_argument("--channels", type=int, default=192)
    p.add_argument("--size", type=int, default=28)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--force", action="store_true")
    args = p.parse_args()
    for name in ("channels", "size", "batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: give a positive whole number")
    if args.json:
        check_writable(args.json, overwrite=args.force)
    chip = get_chip(args.chip)
    widths = [w for w in range(1, args.channels + 1) if args.channels % w == 0]
    rows = []
    for memory_format in (torch.channels_last, torch.contiguous_format):
        for width in widths:
            r = point(args.channels, width, args.size, args.batch, memory_format, chip)
            rows.append(r)
            print(f"{r['layout']:13s} {width:4d} channels a group: measured "
                  f"{r['measured_s'] * 1e3:7.3f} ms ({r['flops_per_s'] / 1e9:6.1f} GFLOP/s), "
                  f"predicted {r['predicted_s'] * 1e3:7.3f} ms  {r['rule']}", flush=True)
    if args.json:
        write_json(args.json, {"chip": chip.id, "rows": rows}, overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
