"""From cached results to the study's tables: one row per (device, model, batch), one training
row per (device, model, train batch), rank correlations, failures. Pure functions of the cache
and the measured chips; the figures, findings and report read only these tables.

Units: FLOPs in FLOP, sizes in bytes, times in seconds, rates in FLOP/s.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from fxroof.prediction import predict
from fxroof.study.cache import Cache
from fxroof.study.sweep import COMPILED, COST, LATENCY, TRAIN, StudyConfig, measured_result


@dataclass
class StudyTables:
    config: StudyConfig
    chips: dict                     # device -> Chip (measured)
    rows: list[dict] = field(default_factory=list)
    train: list[dict] = field(default_factory=list)
    layer_types: list[dict] = field(default_factory=list)  # per (device, model, batch, phase)
    failures: list[dict] = field(default_factory=list)
    compiled: list[dict] = field(default_factory=list)     # eager vs compiled, per model row

    def batches(self, device: Optional[str] = None) -> list[int]:
        return sorted({r["batch"] for r in self.rows if device in (None, r["device"])})


def _get(cache: Cache, failures: list, device, model, batch, phase,
         rounds: int = 1) -> Optional[dict]:
    """A cached result, None where it failed (recorded in ``failures``); a measurement
    (LATENCY, TRAIN) taken in ``rounds`` rounds is its median round's."""
    result = measured_result(cache, rounds, device, model, batch, phase) \
        if phase in (LATENCY, TRAIN) else cache.get(device, model, batch, phase)
    if result is not None and "error" in result:
        failures.append({"device": device, "model": model, "batch": batch, "phase": phase,
                         "error": result["error"]})
        return None
    return result


def _model_row(device, model, batch, cost, latency, chip) -> dict:
    infer = cost["inference"]
    totals, memory = infer["totals"], infer["memory"]
    forward = predict(infer["records"], chip)["forward"]
    row = {"device": device, "model": model, "batch": batch,
           "flops": totals["flops"], "macs": totals["macs"],
           "parameters": cost["parameters"],
           "weight_bytes": memory["parameter_bytes"] + memory["buffer_bytes"],
           "activation_bytes": memory["activation_bytes"],
           "peak_bytes": memory["peak_bytes"],
           "train_peak_bytes": cost["train"].get("memory", {}).get("peak_bytes"),
           "bytes": totals["bytes"], "intensity": totals["intensity"],
           "predicted_s": forward["predicted_s"], "predicted_low_s": forward["low_s"],
           "predicted_high_s": forward["high_s"], "time_model": forward["model"],
           "ideal_s": forward["ideal_s"], "bound": forward["bound"],
           "attainable_flops_per_s": totals["flops"] / forward["ideal_s"],
           "latency_s": None, "throughput_per_s": None, "achieved_flops_per_s": None,
           "pct_of_attainable": None, "prediction_error": None}
    if latency is not None:
        seconds = latency["median_s"]
        row.update(latency_s=seconds, latency_q1_s=latency["q1_s"], latency_q3_s=latency["q3_s"],
                   throughput_per_s=batch / seconds,
                   achieved_flops_per_s=totals["flops"] / seconds,
                   pct_of_attainable=100 * forward["ideal_s"] / seconds,
                   prediction_error=forward["predicted_s"] / seconds - 1)
    return row


def _train_row(device, model, batch, cost, train, chip) -> dict:
    totals = cost["train"]["totals"]
    predicted = predict(cost["train"]["records"], chip)
    timing = train["timing"]
    fw, bw = totals["forward"], totals["backward"]
    return {"device": device, "model": model, "batch": batch,
            "forward_flops": fw["flops"], "backward_flops": bw["flops"],
            "flops_ratio": bw["flops"] / fw["flops"],
            "forward_s": timing["eager_s"]["forward"], "backward_s": timing["eager_s"]["backward"],
            "time_ratio": timing["eager_s"]["backward"] / timing["eager_s"]["forward"],
            "forward_nodes_s": timing["interpreted_s"]["forward"],
            "backward_nodes_s": timing["interpreted_s"]["backward"],
            "forward_predicted_s": predicted["forward"]["predicted_s"],
            "backward_predicted_s": predicted["backward"]["predicted_s"]}


def _compiled_row(row: dict, compiled: dict, chip) -> dict:
    """Eager vs compiled for one model row: bytes, predicted and measured time, speed-ups."""
    predicted = predict(compiled["records"], chip)["forward"]["predicted_s"]
    measured = compiled["median_s"]
    return {"model": row["model"], "batch": row["batch"], "eager_bytes": row["bytes"],
            "compiled_bytes": compiled["totals"]["bytes"], "kernels": compiled["kernels"],
            "predicted_eager_s": row["predicted_s"], "predicted_compiled_s": predicted,
            "latency_s": row["latency_s"], "compiled_latency_s": measured,
            "predicted_speedup": row["predicted_s"] / predicted,
            "measured_speedup": row["latency_s"] / measured if row["latency_s"] else None}


def _layer_rows(device, model, batch, cost, train) -> list[dict]:
    rows = []
    timed = {p: {r["key"]: r.get("time_s") for r in train["layer_types"][p]} for p in
             ("forward", "backward")} if train else {}
    for phase, breakdown in cost["train"]["layer_types"].items():
        for r in breakdown:
            rows.append({"device": device, "model": model, "batch": batch, "phase": phase,
                         "layer_type": r["key"], "flops": r["flops"], "bytes": r["bytes"],
                         "time_s": timed.get(phase, {}).get(r["key"])})
    return rows


def collect(config: StudyConfig, cache: Cache, chips: dict) -> StudyTables:
    tables = StudyTables(config, chips)
    for device in config.devices:
        for model in config.models:
            for batch in config.batches_for(device):
                key = (device, model, batch)
                cost = _get(cache, tables.failures, *key, COST)
                latency = _get(cache, tables.failures, *key, LATENCY, config.rounds)
                if cost is None:
                    continue
                tables.rows.append(_model_row(*key, cost, latency, chips[device]))
                if config.compiled and device == "cpu":
                    compiled = _get(cache, tables.failures, *key, COMPILED)
                    if compiled is not None:
                        tables.compiled.append(_compiled_row(tables.rows[-1], compiled,
                                                             chips[device]))
                if "error" in cost["train"]:
                    tables.failures.append({"device": device, "model": model, "batch": batch,
                                            "phase": "cost (training step)",
                                            "error": cost["train"]["error"]})
                elif batch in config.train_batches_for(device):
                    train = _get(cache, tables.failures, *key, TRAIN, config.rounds)
                    if train is not None:
                        tables.train.append(_train_row(*key, cost, train, chips[device]))
                    tables.layer_types.extend(_layer_rows(*key, cost, train))
    return tables


# ---- rank correlation ----------------------------------------------------------------------
def correlation_columns(tables: StudyTables) -> dict:
    """Variable name -> {(model, batch): value}: latency and predicted latency per device, and
    the device-independent FLOPs and parameter count."""
    columns: dict = {"FLOPs": {}, "parameters": {}}
    for r in tables.rows:
        key = (r["model"], r["batch"])
        columns["FLOPs"][key] = r["flops"]
        columns["parameters"][key] = r["parameters"]
        columns.setdefault(f"fxroof predicted ({r['device']})", {})[key] = r["predicted_s"]
        if r["latency_s"] is not None:
            columns.setdefault(f"latency ({r['device']})", {})[key] = r["latency_s"]
    rank = ("latency", "fxroof predicted", "FLOPs", "parameters")
    order = sorted(columns, key=lambda name: ([name.startswith(r) for r in rank].index(True),
                                              name))
    return {name: columns[name] for name in order}


# A rank correlation over 4 points means little: even a perfect ordering has a two-sided p of
# 2/4! = 0.083. From 5 points a perfect ordering reaches p = 2/5! = 0.017.
MIN_SPEARMAN_POINTS = 5


def spearman(tables: StudyTables, batch: Optional[int] = None) -> dict:
    """{"variables": [...], "rho": matrix, "n": points} over the (model, batch) points every
    variable has (one batch size, or all of them)."""
    from scipy.stats import spearmanr

    columns = correlation_columns(tables)
    keys = set.intersection(*(set(c) for c in columns.values())) if columns else set()
    keys = sorted(k for k in keys if batch is None or k[1] == batch)
    names = list(columns)
    if len(keys) < MIN_SPEARMAN_POINTS:
        return {"variables": names, "rho": None, "n": len(keys)}
    data = [[columns[name][k] for name in names] for k in keys]
    rho = spearmanr(data).statistic
    matrix = [[float(rho[i][j]) for j in range(len(names))] for i in range(len(names))]
    return {"variables": names, "rho": matrix, "n": len(keys)}


def rho(result: dict, a: str, b: str) -> Optional[float]:
    if result["rho"] is None or a not in result["variables"] or b not in result["variables"]:
        return None
    names = result["variables"]
    return result["rho"][names.index(a)][names.index(b)]
