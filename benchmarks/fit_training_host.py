"""Fit fxroof.pipeline.AUTOGRAD_HOST_FACTOR on a GPU's measured eager training steps.

    python benchmarks/fit_training_host.py benchmarks/measured/h200-run*.json --chip h200_sxm
                                           [--chips-file F.yaml] [--json out.json] [--force]

The time model prices each op's host cost with its class's fixed cost t0, fitted on ops
timed alone without autograd (NeuSight's kernels, fxroof's probes). In a training step the
forward also records each op's backward node and saves its inputs, the backward runs
through the autograd engine and the update through the optimizer's Python: the host spends
more per op. One factor on the host costs of a training step's ops, the same in every
phase (the measured steps cannot tell the forward's share from the backward's: forward x2
with backward x0.5 fits them as well as x1.35 on both), is chosen from GRID to minimise the
mean |log(predicted / measured)| over the training runs of `bench_gpu.py measure` files
(several of one GPU are pooled), with the rest of the time model as shipped; and again
leaving each model out, which says how well the factor carries to a model it never saw.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import parsed_chip_arguments, script_main  # noqa: E402
from benchmarks.gpu_compare import analysed, pooled, read_measured  # noqa: E402
from fxroof import prediction, time_model  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import write_json  # noqa: E402

GRID = tuple(round(x, 2) for x in np.arange(0.8, 2.0001, 0.05))


def step_s(phases: dict, factor: float) -> float:
    """A step's predicted seconds with its ops' host costs times ``factor``: each phase's
    nodes (NodeTime, in issue order) pipelined, the phases one after another."""
    return sum(prediction.pipelined_phase_s(times, "predicted_s", factor)
               for times in phases.values())


def _log_error(run: dict, factor: float) -> float:
    return abs(math.log(step_s(run["phases"], factor) / run["measured_s"]))


def best_factor(runs: list[dict], leave_out: str = "") -> float:
    """The factor of GRID with the least mean |log(predicted / measured)| over ``runs``
    ({"model", "measured_s", "phases"}) of every model but ``leave_out``."""
    kept = [r for r in runs if r["model"] != leave_out]
    return min(GRID, key=lambda f: statistics.fmean(_log_error(r, f) for r in kept))


def fit(runs: list[dict]) -> dict:
    """The factor fitted on every run, the one fitted leaving each model out, and the median
    |predicted / measured - 1| at factor 1 and at each run's left-out fit."""
    models = sorted({r["model"] for r in runs})
    left_out = {m: best_factor(runs, m) for m in models}

    def error(run: dict, factor: float) -> float:
        return abs(step_s(run["phases"], factor) / run["measured_s"] - 1)
    return {"runs": len(runs), "factor": best_factor(runs), "leave_one_model_out": left_out,
            "median_error": {
                "factor 1": round(statistics.median(error(r, 1.0) for r in runs), 3),
                "left-out fit": round(statistics.median(error(r, left_out[r["model"]])
                                                        for r in runs), 3)}}


def training_runs(files: list[dict], chip) -> list[dict]:
    """The pooled training runs of `measure` files, each with its step's node times on
    ``chip`` by phase."""
    runs = []
    for run in pooled(files):
        if run["phase"] != "training":
            continue
        phases: dict = {}
        for record in analysed(run, chip):
            phases.setdefault(record["phase"], []).append(time_model.node_time(record, chip))
        runs.append({"model": run["model"], "measured_s": run["median_s"], "phases": phases})
    if not runs:
        raise FxroofError("The measured files hold no training runs: give files that "
                          "`bench_gpu.py measure --train-batch ...` wrote.")
    return runs


def main(argv=None) -> int:
    args, chip = parsed_chip_arguments(__doc__, "measured", "JSON files from `bench_gpu.py measure`", argv)
    files = [read_measured(path) for path in args.measured]
    result = {"benchmark": "training_host_factor", "chip": chip.id,
              "measured_on": files[0]["environment"].get("gpu"),
              **fit(training_runs(files, chip))}
    print(json.dumps(result, indent=1))
    if args.json:
        write_json(args.json, result, overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
