"""The band of a host-bound GPU step: how far hosts' per-op costs stray from the shipped t0.

    python benchmarks/fit_host_band.py benchmarks/measured/h100-run*.json \
        benchmarks/measured/h200-run*.json [--json out.json] [--force]

On a GPU, a small batch's eager step is host-bound: the device waits while the host issues
each op (fxroof.pipeline), so the step takes about the sum of the ops' host costs, which
the time model prices with each class's fixed cost t0, fitted on NeuSight's hosts (torch
2.1, 23-48 us). The host is not the chip's: nothing in chips.yaml says which CPU, Python
and PyTorch issue the ops, and hosts differ by 2-3x. So where the model says a step is
host-bound -- the device idle for at least HOST_BOUND_SHARE of it -- its measured over
predicted time is the host's speed against t0's, and its spread is the part of a
prediction's uncertainty that the kernels' band does not hold.

The sources, one per host software (the PyTorch that issues the ops), each weighing one
whatever its number of points:
* the `bench_gpu.py measure` files given, pooled per GPU, grouped by their torch version
  (the workplace's H100 and H200 VMs: torch 2.11);
* DeepLearningExamples' inference latencies on the DGX-1 V100, the T4 and the DGX A100
  (bench_public_gpu.py: ResNet-50 and EfficientNet-B0, pytorch-21.03 NGC container).

It prints each source's host-bound points (their median and range of measured /
predicted), the pooled p10 and p90 (what ships as fxroof.pipeline.HOST_BAND), and, leaving
each source out, the share of its points inside the band the others give: how well the
band carries to a host it never saw.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import parsed_output_arguments, script_main  # noqa: E402
from benchmarks.bench_public_gpu import latency_steps  # noqa: E402
from benchmarks.gpu_compare import analysed, pooled, read_measured  # noqa: E402
from fxroof import analyze  # noqa: E402
from fxroof.chips import get_chip, load_chips  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import write_json  # noqa: E402
from fxroof.measure import datasheet_chip  # noqa: E402
from fxroof.pipeline import HOST_BAND  # noqa: E402
from fxroof.prediction import predict  # noqa: E402
from fxroof.roofline import cudnn_search  # noqa: E402

# A step is host-bound where the device waits for the host at least this share of it: then
# the step is mostly the host's costs, and measured / predicted mostly the host's speed.
# (0.3-0.75 move either end of the band by under 0.08.)
HOST_BOUND_SHARE = 0.5


def host_share_and_ratio(records: list[dict], chip, measured_s: float,
                         phase: str) -> tuple[float, float]:
    """(the share of the predicted step the device waits for the host, measured /
    predicted) of one step."""
    step = predict(records, chip)[phase]
    return step.get("host_wait_s", 0.0) / step["predicted_s"], measured_s / step["predicted_s"]


def host_bound(points: list[tuple[float, float]]) -> list[float]:
    """measured / predicted of the points the model says are host-bound."""
    return [ratio for share, ratio in points if share >= HOST_BOUND_SHARE]


def measured_source(paths: list[str]) -> tuple[str, list[tuple[float, float]]]:
    """(host software, host_share_and_ratio of each run) of one GPU's `measure` files,
    pooled."""
    files = [read_measured(path) for path in paths]
    gpu = files[0]["environment"].get("gpu", "")
    chip = datasheet_chip(gpu, load_chips())  # the chip the driver's name is
    if chip is None:
        raise FxroofError(f"'{paths[0]}' was measured on {gpu or 'an unnamed GPU'}, which no "
                          "chip in chips.yaml is: give files measured on a GPU fxroof lists "
                          "(`fxroof chips`).")
    torch_version = files[0]["environment"].get("torch", "?")
    with cudnn_search(bool(files[0]["environment"].get("cudnn_benchmark", False))):
        points = [host_share_and_ratio(analysed(run, chip), chip, run["median_s"], "overall")
                  for run in pooled(files)]
    return f"torch {torch_version}", points


def public_source() -> tuple[str, list[tuple[float, float]]]:
    """(host software, host_share_and_ratio of each step) of DeepLearningExamples' 2021
    inference latencies."""
    found = []
    with cudnn_search():  # its ConvNets/main.py sets cudnn.benchmark
        for model, chip_id, amp, memory_format, batch, seconds in latency_steps():
            chip = get_chip(chip_id)
            records = analyze(model, batch=batch, device="cuda", chip=chip, amp=amp,
                              memory_format=memory_format).records()
            found.append(host_share_and_ratio(records, chip, seconds, "forward"))
    return "pytorch-21.03 NGC (DeepLearningExamples: V100, T4, A100)", found


def band(sources: dict[str, list[float]], quantiles=(10, 90)) -> tuple[float, float]:
    """The p10 and p90 of measured / predicted over the sources' points, each source
    weighing one whatever its number of points."""
    values = np.concatenate([np.asarray(r) for r in sources.values()])
    weights = np.concatenate([np.full(len(r), 1 / len(r)) for r in sources.values()])
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    # the first point whose cumulative weight reaches q (less a rounding error's worth)
    return tuple(float(values[order][np.searchsorted(cumulative, q / 100 - 1e-9)])
                 for q in quantiles)


def summary(sources: dict[str, list[float]]) -> dict:
    low, high = band(sources)
    result = {"host_bound_share": HOST_BOUND_SHARE, "band": [round(low, 3), round(high, 3)],
              "shipped": list(HOST_BAND), "sources": {}}
    for name, ratios in sources.items():
        entry = {"points": len(ratios), "median": round(statistics.median(ratios), 3),
                 "range": [round(min(ratios), 3), round(max(ratios), 3)]}
        others = {k: v for k, v in sources.items() if k != name}
        if others:
            lo, hi = band(others)
            entry["left_out_band"] = [round(lo, 3), round(hi, 3)]
            entry["inside_left_out_band"] = round(
                sum(lo <= r <= hi for r in ratios) / len(ratios), 3)
        entry["inside_shipped_band"] = round(
            sum(HOST_BAND[0] <= r <= HOST_BAND[1] for r in ratios) / len(ratios), 3)
        result["sources"][name] = entry
    return result


def main(argv=None) -> int:
    args = parsed_output_arguments(__doc__, argv,
                                   ("measured", "JSON files from `bench_gpu.py measure`"))
    by_gpu: dict[str, list[str]] = {}
    for path in args.measured:
        by_gpu.setdefault(read_measured(path)["environment"].get("gpu", ""), []).append(path)
    found: dict[str, list] = {}  # one host software, one source: its GPUs' points together
    for name, points in [*(measured_source(paths) for paths in by_gpu.values()),
                         public_source()]:
        found.setdefault(name, []).extend(points)
    sources = {name: host_bound(points) for name, points in found.items()}
    sources = {name: ratios for name, ratios in sources.items() if ratios}
    result = {"benchmark": "host_band", **summary(sources)}
    print(json.dumps(result, indent=1))
    if args.json:  # with every step's (host-wait share, measured / predicted)
        write_json(args.json, {**result, "points": found}, overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
