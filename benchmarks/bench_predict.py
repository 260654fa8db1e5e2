"""Predicted vs measured step time on this machine: the ideal roofline against the calibrated
time model, over a study's models and batch sizes.

    python benchmarks/bench_predict.py --out /tmp/study [--models ...] [--batch 1 8 32 64]
                                       [--train-batch 1] [--in-process] [--report-only]
                                       [--chip this-cpu] [--json r.json] [--rounds 3]
                                       [--allocator glibc|caching]
    python benchmarks/bench_predict.py --pool r1.json r2.json [r3.json] [--json pooled.json]

Runs (or resumes, or with --report-only reads) an `fxroof study` on the CPU -- which measures
this machine's roofs and calibrates its time model first -- then, for every (model, batch),
compares the measured eager latency (inference) and the measured eager training step
(forward + backward) with fxroof's prediction on the measured chip, ideal and calibrated:
median and worst |predicted / measured - 1|, and Spearman rho between predicted and measured
per batch size. Issue 16's goal on this CPU: median <= 15%, worst <= 40%, rho >= 0.98.
With --allocator caching the study measures in processes running tcmalloc (no page faults
once warm) and costs every step without faults; --chip should then name a chip measured
under tcmalloc too (`LD_PRELOAD=libtcmalloc_minimal.so.4 fxroof chips measure --full`), as
the study's own quick chip is. The study measures every point in --rounds rounds (default
3; `fxroof study --rounds`), round after round over the points, minutes apart, and a point's
measured time is its median round's, so that a slow spell of the machine does not decide a
model's time; each round takes about as long as the study's own measuring (on this 2-core
CPU 4 min at batch 1, 22 min at batches 8, 32 and 64 with training at 8). With
--leave-one-out, a third prediction (in_model): calibrated on the probes and on the timed
nodes of every studied model but the one predicted (fxroof.model_probes).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Optional

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import rho_per_batch, script_main  # noqa: E402

from fxroof import calibration as cal, model_probes, probes  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import atomic  # noqa: E402
from fxroof.prediction import predict  # noqa: E402
from fxroof.study import DEFAULT_MODELS, StudyConfig, run_study  # noqa: E402
from fxroof.study.cache import Cache  # noqa: E402
from fxroof.study.sweep import (COST, LATENCY, TRAIN, measure_roofs,  # noqa: E402
                                measured_result, measured_seconds)
from fxroof.validate import positive_int_arg  # noqa: E402


def found_chip(config: StudyConfig, out: str, chip_id: Optional[str] = None):
    """The chip to predict on: ``chip_id`` from the chip database (e.g. this-cpu from a
    `chips measure --full` in FXROOF_CHIPS_DIR), else the study's own quick chip of this CPU."""
    if chip_id:
        return get_chip(chip_id)
    return measure_roofs(config, Cache(out), force=False, progress=False,
                         allow_measure=False)["cpu"]


def points(config: StudyConfig, out: str, chip) -> list[dict]:
    """One point per (phase, model, batch) with a measurement: measured and predicted s."""
    cache = Cache(out)
    found = []
    for model in config.models:
        for batch in config.batches_for("cpu"):
            cost = cache.get("cpu", model, batch, COST)
            if not cost or "error" in cost:
                continue
            latency = measured_result(cache, config.rounds, "cpu", model, batch, LATENCY)
            if latency and "error" not in latency:
                found.append(_point("inference", model, batch, latency["median_s"],
                                    cost["inference"]["records"], chip, latency))
            train = measured_result(cache, config.rounds, "cpu", model, batch, TRAIN)
            if train and "error" not in train and "records" in cost["train"]:
                found.append(_point("training", model, batch, measured_seconds(TRAIN, train),
                                    cost["train"]["records"], chip, train))
    return found


def _point(phase, model, batch, measured, records, chip, result) -> dict:
    return {"phase": phase, "model": model, "batch": batch, "measured_s": measured,
            "measured_rounds_s": result.get("rounds_s", [measured]),
            "ideal_s": predict(records, chip, "ideal")["overall"]["predicted_s"],
            "calibrated_s": predict(records, chip)["overall"]["predicted_s"],
            "records": records}


def leave_one_model_out(found: list[dict], config: StudyConfig, chip, repeats: int) -> None:
    """Add "in_model_s" to every point: the prediction on a chip calibrated on this CPU's
    probes and on the timed nodes (fxroof.model_probes) of every studied model but the
    point's own -- what `chips measure --full` does with its calibration models, validated
    on models it never saw."""
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    cpu = torch.device("cpu")
    probe_rows, faults = probes.probe_rows(cpu, quick=False), probes.fresh_rate(cpu, 10)
    reorders = probes.layout_rate(cpu, chip.bandwidth)
    own: dict = {}
    for model in config.models:
        runs = [model_probes.Run(model, b) for b in config.batches_for("cpu")] + \
            [model_probes.Run(model, b, backward=True) for b in config.train_batches]
        own[model] = model_probes.model_rows("cpu", runs, repeats, say)
    for model in config.models:
        rows = {c: list(r) for c, r in probe_rows.items()}
        for other, by_class in own.items():
            for op_class, r in by_class.items():
                if other != model:
                    rows.setdefault(op_class, []).extend(r)
        fitted = probes.fit_classes(rows, chip, faults, f"leave {model} out", layout=reorders)
        unseen = dataclasses.replace(chip, calibration={
            c: cal.parse_params(e, c) for c, e in fitted.items()})
        for p in found:
            if p["model"] == model:
                p["in_model_s"] = predict(p["records"], unseen)["overall"]["predicted_s"]


def summary(found: list[dict]) -> dict:
    result = {}
    for phase in ("inference", "training"):
        mine = [p for p in found if p["phase"] == phase]
        if not mine:
            continue
        for model in ("ideal", "calibrated", "in_model"):
            if not all(f"{model}_s" in p for p in mine):
                continue
            errors = [abs(p[f"{model}_s"] / p["measured_s"] - 1) for p in mine]
            rho = rho_per_batch(mine, f"{model}_s", "measured_s")
            result[f"{phase} {model}"] = {
                "points": len(mine), "median_error": round(statistics.median(errors), 3),
                "worst_error": round(max(errors), 3),
                "worst": max(mine, key=lambda p: abs(p[f"{model}_s"] / p["measured_s"] - 1))
                ["model"], "spearman_rho_per_batch": rho}
    return result


def pooled(runs: list[list[dict]]) -> list[dict]:
    """The points of several runs' --json files (one study's costs and chip, its latencies
    measured again: a copy of the folder without its latency and train results, resumed),
    each point's measured_s the median over the runs; only points every run has."""
    by_point: dict = {}
    for points_ in runs:
        for p in points_:
            by_point.setdefault((p["phase"], p["model"], p["batch"]), []).append(p)
    return [{**found[0], "measured_s": statistics.median(p["measured_s"] for p in found),
             "runs": len(found)} for found in by_point.values() if len(found) == len(runs)]


def agreement(runs: list[list[dict]]) -> dict:
    """How alike the runs' own measurements rank the models: Spearman rho per phase and
    batch between each pair of runs -- the ceiling of any prediction's rho on this machine."""
    out: dict = {}
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            other = {(p["phase"], p["model"], p["batch"]): p["measured_s"] for p in runs[j]}
            for phase in ("inference", "training"):
                both = [{**p, "again_s": other[(phase, p["model"], p["batch"])]}
                        for p in runs[i] if p["phase"] == phase
                        and (phase, p["model"], p["batch"]) in other]
                out.setdefault(phase, []).append(rho_per_batch(both, "again_s",
                                                               "measured_s"))
    return out


def report_pooled(paths: list[str], json_path: Optional[str]) -> int:
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                runs.append(json.load(f)["points"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FxroofError(f"--pool {path}: not a bench_predict --json file that can be "
                              f"read ({type(e).__name__}: {e}). Pass the files earlier runs "
                              "wrote with --json.") from None
    found = pooled(runs)
    result = {"benchmark": "predict, pooled", "runs": paths, **summary(found),
              "measured run against run: rho per batch": agreement(runs)}
    print(json.dumps(result, indent=1))
    if json_path:
        with atomic(json_path) as f:
            json.dump({"summary": result, "points": found}, f, indent=1)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="study folder (new, or one to resume)")
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--train-batch", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed runs first (a CPU's small-batch latency keeps falling "
                             "over the first few)")
    parser.add_argument("--in-process", action="store_true",
                        help="measure each latency in the study's own process, as before "
                             "fresh processes (fxroof.latency); a folder made the other way "
                             "is another study, and latencies cached before fresh processes "
                             "existed are measured again")
    parser.add_argument("--allocator", choices=["glibc", "caching"], default="glibc",
                        help="the measured processes' host allocator (fxroof study "
                             "--allocator)")
    parser.add_argument("--rounds", type=positive_int_arg, default=3,
                        help="the study's --rounds: every point measured this many times, "
                             "round after round over the points, the median kept (1: once)")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--chip", help="predict on this chip id (e.g. this-cpu after `fxroof "
                                       "chips measure --full`) instead of the study's quick "
                                       "chip")
    parser.add_argument("--json", help="also write the points and the summary here")
    parser.add_argument("--leave-one-out", action="store_true",
                        help="also calibrate on the timed nodes of every model but the one "
                             "predicted (in_model), probes included")
    parser.add_argument("--pool", nargs="+", metavar="JSON",
                        help="measure nothing: pool earlier runs' --json files (the median "
                             "of each point's measured time) and say how alike the runs' "
                             "measurements rank the models")
    args = parser.parse_args(argv)
    if args.pool:
        return report_pooled(args.pool, args.json)
    if not args.out:
        parser.error("--out is required (the study folder), unless --pool")
    config = StudyConfig(models=args.models, batches=args.batch, train_batches=args.train_batch,
                         repeats=args.repeats, warmup=args.warmup, rounds=args.rounds,
                         fresh_process=not args.in_process,
                         allocator=args.allocator).resolved()
    start = time.perf_counter()
    if not args.report_only:
        run_study(config, args.out)
    chip = found_chip(config, args.out, args.chip)
    found = points(config, args.out, chip)
    if args.leave_one_out:
        leave_one_model_out(found, config, chip, args.repeats)
    for p in found:
        del p["records"]
    # the models `chips measure --full` fits on; the rest test a full chip on unseen models
    seen = {run.model for run in model_probes.CALIBRATION_MODELS}
    result = {"benchmark": "predict", "device": "cpu", "chip": chip.id,
              "allocator": args.allocator, "wall_s":
              round(time.perf_counter() - start, 1), **summary(found),
              "unseen": summary([p for p in found if p["model"] not in seen])}
    print(json.dumps(result, indent=1))
    if args.json:
        with atomic(args.json) as f:
            json.dump({"summary": result, "points": found}, f, indent=1)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
