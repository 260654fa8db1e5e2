"""How well any model of a convolution's shape could price NeuSight's convolution sweep: the
ceiling of the calibrated time model's convolution class, read off the data.

    python benchmarks/conv_sweep_ceiling.py [--data ../shared/data/gpu-kernels]

The shipped convolution class misses issue 16's goal (15% MAPE leave-one-GPU-out; its own
fits reach 26-32%). This asks where the rest of the error lives. Per GPU of the sweep
(3x3 nn.Conv2d, cuDNN's engine search on, five NVIDIA GPUs timing the same shapes):

* own fit: the shipped model's own parameters (calibrate_gpu_kernels.fit_all), MAPE;
* smooth in shape: least squares of log(time) on 1, log m, log n, log k and their squares
  (m = batch x output positions, n = output channels, k = 9 x input channels), fitted on
  the GPU's own rows -- what a smooth function of the shape reaches at best, fitted freely;
* nearest shapes: each row priced from its NEIGHBOURS nearest shapes on the same GPU
  (standardised log batch, channels and size), scaled by FLOPs -- how smooth the times are;
* another GPU's time: each row priced as another GPU's time for the same shape, times the
  median ratio of the two GPUs' times (the best and the geometric mean of the others) --
  how much of a shape's time other GPUs share, given the scale. It peeks at the GPU's own
  scale, so it bounds what shape knowledge could transfer; it is not a predictor.
And the correlation, over shared shapes, of two GPUs' own-fit residuals (log measured /
predicted): near 1 where the model's misses are the shape's, not the GPU's.

The data is read where it lies (MIT licence, notice in fxroof/LICENSE-NeuSight.txt).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
from collections import defaultdict

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import calibrate_gpu_kernels as kernels, script_main  # noqa: E402

NEIGHBOURS = 5
SHAPE = ("batch", "c_in", "c_out", "in_size")  # the sweep's free dimensions


def mape(predicted, measured) -> float:
    """Mean |predicted / measured - 1|, in percent."""
    return float(np.mean(np.abs(np.asarray(predicted) / np.asarray(measured) - 1)) * 100)


def smooth_fit_mape(m, n, k, seconds) -> float:
    """MAPE of log(seconds) fitted by least squares on a quadratic in log m, log n, log k."""
    logs = np.log(np.column_stack([m, n, k]))
    design = np.column_stack([np.ones(len(seconds)), logs, logs ** 2])
    coef, *_ = np.linalg.lstsq(design, np.log(seconds), rcond=None)
    return mape(np.exp(design @ coef), seconds)


def nearest_shapes_mape(shapes, flops, seconds, neighbours: int = NEIGHBOURS) -> float:
    """MAPE of each row priced as the geometric mean of its nearest rows' times (standardised
    log shape; itself excluded), each scaled by the FLOP ratio."""
    logs = np.log(np.asarray(shapes, dtype=float))
    logs = logs / logs.std(axis=0)
    flops, seconds = np.asarray(flops, dtype=float), np.asarray(seconds, dtype=float)
    predicted = np.empty(len(seconds))
    for i in range(len(seconds)):  # row by row: the distance matrix of 5,000 rows is 200 MB
        distance = ((logs - logs[i]) ** 2).sum(axis=1)
        distance[i] = np.inf
        near = np.argpartition(distance, neighbours)[:neighbours]
        predicted[i] = np.exp(np.mean(np.log(seconds[near] * flops[i] / flops[near])))
    return mape(predicted, seconds)


def scaled_copy(times: dict, gpu: str, other: str) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, measured) for the shapes both GPUs timed: the other GPU's time times the
    median ratio of the two; ``times``: {gpu: {shape: seconds}}."""
    shared = [s for s in times[gpu] if s in times[other]]
    mine = np.array([times[gpu][s] for s in shared])
    theirs = np.array([times[other][s] for s in shared])
    return theirs * np.median(mine / theirs), mine


def copy_mapes(times: dict, gpu: str) -> tuple[float, float]:
    """(best over the other GPUs, geometric mean of all of them) of scaled_copy's MAPE; the
    mean over the shapes every GPU timed."""
    others = [o for o in times if o != gpu]
    best = min(mape(*scaled_copy(times, gpu, o)) for o in others)
    everywhere = [s for s in times[gpu] if all(s in times[o] for o in others)]
    sub = {g: {s: times[g][s] for s in everywhere} for g in times}
    predicted = np.exp(np.mean([np.log(scaled_copy(sub, gpu, o)[0]) for o in others], axis=0))
    return best, mape(predicted, [sub[gpu][s] for s in everywhere])


def residual_correlations(residuals: dict) -> list[float]:
    """Pearson correlation of two GPUs' log residuals over their shared shapes, each pair."""
    names, found = sorted(residuals), []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = [s for s in residuals[a] if s in residuals[b]]
            found.append(float(np.corrcoef([residuals[a][s] for s in shared],
                                           [residuals[b][s] for s in shared])[0, 1]))
    return found


def read_rows(data: str) -> dict:
    """{gpu: [row dict]} of the convolution sweep, in file order (the order load() keeps)."""
    rows = defaultdict(list)
    with open(os.path.join(data, kernels.FILES["conv"])) as f:
        for row in csv.DictReader(f):
            rows[row["gpu"]].append(row)
    return rows


def ceiling(data: str) -> tuple[list, list]:
    """(one line per GPU: its MAPEs, the pairs' residual correlations)."""
    gpus, sweeps = kernels.load(data)
    fitted = kernels.fit_all(gpus, sweeps)
    raw = read_rows(data)
    times = {g: {tuple(r[c] for c in SHAPE): float(r["latency_s"]) for r in rows}
             for g, rows in raw.items()}
    lines, residuals = [], {}
    for gpu in sorted(raw):
        sweep = sweeps[gpu, "conv"]
        ratio = kernels.ratios(fitted[gpu, "conv"], sweep, gpus[gpu], "conv")
        keys = [tuple(r[c] for c in SHAPE) for r in raw[gpu]]
        residuals[gpu] = dict(zip(keys, np.log(ratio)))
        shapes = [[float(r[c]) for c in ("batch", "c_in", "c_out", "out_size")]
                  for r in raw[gpu]]
        best, pooled = copy_mapes(times, gpu)
        lines.append({"gpu": gpu, "rows": len(sweep), "own": kernels.mape(ratio),
                      "smooth": smooth_fit_mape(*sweep.dims[1:], sweep.seconds),
                      "nearest": nearest_shapes_mape(shapes, sweep.flops, sweep.seconds),
                      "copy_best": best, "copy_pooled": pooled})
    return lines, residual_correlations(residuals)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=kernels.DEFAULT_DATA, help="the gpu-kernels folder")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.data):
        print(f"conv_sweep_ceiling: no data folder '{args.data}' (pass --data)",
              file=sys.stderr)
        return 1
    lines, correlations = ceiling(args.data)
    print("| GPU | rows | own fit | smooth in shape | nearest shapes | another GPU's time "
          "(best; all others) |\n|---|---:|---:|---:|---:|---:|")
    for x in lines:
        print(f"| {x['gpu']} | {x['rows']:,} | {x['own']:.1f}% | {x['smooth']:.1f}% | "
              f"{x['nearest']:.1f}% | {x['copy_best']:.1f}%; {x['copy_pooled']:.1f}% |")
    print(f"\nown-fit residuals, correlation between two GPUs over shared shapes: "
          f"{min(correlations):.2f}-{max(correlations):.2f} "
          f"(median {np.median(correlations):.2f}, {len(correlations)} pairs)")
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
