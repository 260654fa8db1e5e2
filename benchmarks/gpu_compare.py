"""`bench_gpu.py compare`: fxroof's predictions for measured GPU runs, and their error.

Every measured run is analysed for the CUDA target on fake tensors (no GPU needed) as the
same step -- eval forward for inference; forward, cross-entropy, backward and an SGD update
for training; ``amp="bf16"`` for the bf16 runs -- and predicted on the chip with the ideal
roofline and the calibrated time model.
"""
from __future__ import annotations

import json
import statistics

from benchmarks import checked_chip, read_recorded, rho_per_batch
from fxroof import analyze
from fxroof.errors import FxroofError
from fxroof.files import write_json
from fxroof.prediction import predict
from fxroof.roofline import cudnn_search

ROOFS = ("ideal", "calibrated")


def analysed(run: dict, chip) -> list[dict]:
    """The node records of the run's step, analysed for the CUDA target on ``chip``."""
    training = run["phase"] == "training"
    return analyze(run["model"], batch=run["batch"], device="cuda", chip=chip,
                   amp="bf16" if run["precision"] == "bf16" else None,
                   loss="cross_entropy" if training else None,
                   optimizer="sgd" if training else None).records()


def predicted(run: dict, chip) -> dict:
    """The run's step, analysed for the CUDA target and predicted on ``chip`` (s)."""
    records = analysed(run, chip)
    calibrated = predict(records, chip)["overall"]
    return {"ideal_s": predict(records, chip, "ideal")["overall"]["predicted_s"],
            "calibrated_s": calibrated["predicted_s"], "low_s": calibrated["low_s"],
            "high_s": calibrated["high_s"], "nodes": len(records)}


def _error(p: dict, roof: str) -> float:
    return abs(p[f"{roof}_s"] / p["median_s"] - 1)


def summary(points: list[dict]) -> dict:
    """Per (precision, phase) and roof: median and worst error, Spearman rho per batch, and
    the share of runs whose measured time lies inside the calibrated band."""
    result = {}
    for key in sorted({(p["precision"], p["phase"]) for p in points}):
        mine = [p for p in points if (p["precision"], p["phase"]) == key]
        entry = {"runs": len(mine)}
        for roof in ROOFS:
            rho = rho_per_batch(mine, f"{roof}_s", "median_s")
            worst = max(mine, key=lambda p: _error(p, roof))
            entry[roof] = {
                "median_error": round(statistics.median(_error(p, roof) for p in mine), 3),
                "median_ratio": round(statistics.median(p[f"{roof}_s"] / p["median_s"]
                                                        for p in mine), 3),
                "worst_error": round(_error(worst, roof), 3),
                "worst": f"{worst['model']} b{worst['batch']}", "spearman_rho": rho}
        entry["inside_band"] = round(sum(p["low_s"] <= p["median_s"] <= p["high_s"]
                                         for p in mine) / len(mine), 3)
        repeated = [p["spread"] for p in mine if p.get("measurements", 1) > 1]
        if repeated:  # how far the measurements themselves disagree: the floor of the error
            entry["measured_spread_median"] = round(statistics.median(repeated), 3)
        result[" ".join(key)] = entry
    return result


def pooled(files: list[dict]) -> list[dict]:
    """One run per (model, phase, precision, batch) of several measurements of one GPU: the
    median of their medians (s), with how many there were and their spread (slowest /
    fastest) -- on a host-bound step two runs of one machine differed by up to 1.7x."""
    times: dict = {}
    for measured in files:
        for run in measured["runs"]:
            if "error" not in run:
                key = (run["model"], run["phase"], run["precision"], run["batch"])
                times.setdefault(key, []).append(run["median_s"])
    return [{"model": model, "phase": phase, "precision": precision, "batch": batch,
             "median_s": statistics.median(seconds), "measurements": len(seconds),
             "spread": max(seconds) / min(seconds)}
            for (model, phase, precision, batch), seconds in times.items()]


def compare(args) -> int:
    chip = checked_chip(args)
    files = [read_measured(path) for path in args.measured]
    gpus = {measured["environment"].get("gpu") for measured in files}
    if len(gpus) > 1:
        raise FxroofError(f"The measured files come from {len(gpus)} GPUs "
                          f"({', '.join(sorted(map(str, gpus)))}): pool runs of one GPU.")
    # cuDNN's engine search as it was where they were measured (bench_gpu.py: PyTorch's
    # default, off): the transposes of an NCHW tensor-core convolution depend on it
    with cudnn_search(bool(files[0]["environment"].get("cudnn_benchmark", False))):
        points = [{**run, **predicted(run, chip)} for run in pooled(files)]
    result = {"benchmark": "gpu_predict", "chip": chip.id,
              "measured_on": files[0]["environment"], "files": len(files), **summary(points)}
    print(json.dumps(result, indent=1))
    if args.json:
        write_json(args.json, {"summary": result, "points": points}, overwrite=args.force)
    return 0


def _check_runs(runs: list) -> None:
    for i, run in enumerate(runs):
        lacking = [k for k in ("model", "phase", "precision", "batch") if k not in run]
        if lacking or not ("median_s" in run or "error" in run):
            raise ValueError(f"run {i} lacks {', '.join(lacking) or 'median_s'}")


def read_measured(path: str) -> dict:
    """The runs of a `measure` file, or a clear error naming what is wrong with it."""
    return read_recorded(path, "gpu_step_times", "bench_gpu.py measure --out",
                         "a file of measured runs", _check_runs)
