"""Findings: short statements computed from the study's tables. Every sentence is built from
the numbers it states; a finding whose data is missing is left out, never filled with text."""
from __future__ import annotations

import statistics
from collections import Counter

from fxroof.units import si
from fxroof.study.tables import StudyTables, rho, spearman


def _names(rows, key="model") -> str:
    return ", ".join(r[key] for r in rows)


def bound_findings(t: StudyTables) -> list[str]:
    out = []
    for device, chip in t.chips.items():
        for batch in t.batches(device):
            rows = [r for r in t.rows if r["device"] == device and r["batch"] == batch]
            memory = [r for r in rows if r["bound"] == "memory"]
            if rows:
                out.append(
                    f"On {chip.name} at batch {batch}, {len(memory)} of {len(rows)} models are "
                    "memory-bound by fxroof's roofline (most of their predicted time is in "
                    "nodes below the ridge point)" + (f": {_names(memory)}." if memory else "."))
    return out


def predictor_findings(t: StudyTables) -> list[str]:
    out = []
    for device in t.chips:
        latency, predicted = f"latency ({device})", f"fxroof predicted ({device})"
        for batch in [None, *t.batches(device)]:
            result = spearman(t, batch)
            scores = {name: rho(result, latency, name)
                      for name in (predicted, "FLOPs", "parameters")}
            if any(v is None for v in scores.values()):
                continue
            best = max(scores, key=scores.get)
            where = "over all batch sizes" if batch is None else f"at batch {batch}"
            out.append(
                f"{device} latency {where} (n = {result['n']}): Spearman rho with fxroof's "
                f"predicted latency {scores[predicted]:.3f}, with FLOPs {scores['FLOPs']:.3f}, "
                f"with parameters {scores['parameters']:.3f}; the best predictor is "
                f"{best.replace(f' ({device})', '')}.")
    return out


def _rows_with(t: StudyTables, device: str, key: str) -> list[dict]:
    """The device's (model, batch) rows that carry ``key`` (were timed)."""
    return [r for r in t.rows if r["device"] == device and r[key] is not None]


def gap_findings(t: StudyTables) -> list[str]:
    out = []
    for device, chip in t.chips.items():
        timed = [r for r in _rows_with(t, device, "pct_of_attainable") if r["pct_of_attainable"]]
        if len(timed) < 2:
            continue
        timed.sort(key=lambda r: r["pct_of_attainable"])
        low, high = timed[:3], timed[-1]
        out.append(
            f"Largest gaps to the roof on {chip.name}: " + "; ".join(
                f"{r['model']} at batch {r['batch']} reaches {r['pct_of_attainable']:.0f}% of "
                f"its attainable {si(r['attainable_flops_per_s'], 'FLOP/s')} "
                f"({si(r['achieved_flops_per_s'], 'FLOP/s')} achieved)" for r in low)
            + f". Closest: {high['model']} at batch {high['batch']}, "
              f"{high['pct_of_attainable']:.0f}%.")
    return out


def accuracy_findings(t: StudyTables) -> list[str]:
    """How far fxroof's predicted latency is from the measured one: the study checks itself."""
    out = []
    for device, chip in t.chips.items():
        timed = _rows_with(t, device, "prediction_error")
        if timed:
            worst = max(timed, key=lambda r: abs(r["prediction_error"]))
            median = statistics.median(abs(r["prediction_error"]) for r in timed)
            out.append(f"fxroof's predicted latency on {chip.name} ({timed[0]['time_model']} "
                       f"time model) is off by a median {100 * median:.0f}% over {len(timed)} "
                       f"(model, batch) points; worst {worst['model']} at batch "
                       f"{worst['batch']}, {100 * worst['prediction_error']:+.0f}%.")
    return out


def batch_findings(t: StudyTables) -> list[str]:
    out = []
    for device in t.chips:
        batches = t.batches(device)
        if len(batches) < 2:
            continue
        first, last = batches[0], batches[-1]
        by_model = {}
        for r in t.rows:
            if r["device"] == device and r["batch"] in (first, last):
                by_model.setdefault(r["model"], {})[r["batch"]] = r
        gains = [(m, v[last]["intensity"] / v[first]["intensity"], v) for m, v in by_model.items()
                 if len(v) == 2]
        if gains:
            gains.sort(key=lambda g: g[1])
            (lo, lo_gain, _), (hi, hi_gain, hi_rows) = gains[0], gains[-1]
            out.append(
                f"From batch {first} to {last}, intensity rises most for {hi} "
                f"({hi_rows[first]['intensity']:.1f} to {hi_rows[last]['intensity']:.1f} "
                f"FLOP/byte, x{hi_gain:.1f}: its weights are re-read less per image) and least "
                f"for {lo} (x{lo_gain:.2f}).")
        flips = [m for m, v in by_model.items() if len(v) == 2 and v[first]["bound"]
                 != v[last]["bound"]]
        if flips:
            out.append(f"Between batch {first} and {last} these models change bound on this "
                       f"device's roofline: {', '.join(flips)}.")
    return out


def training_findings(t: StudyTables) -> list[str]:
    out = []
    if t.train:
        rows = sorted(t.train, key=lambda r: r["flops_ratio"])
        out.append(
            f"Backward:forward FLOPs range from {rows[0]['flops_ratio']:.2f} "
            f"({rows[0]['model']}) to {rows[-1]['flops_ratio']:.2f} ({rows[-1]['model']}); "
            "about 2 is expected (gradients of inputs and of weights), less where the first "
            "layer needs no input gradient.")
        rows = sorted(t.train, key=lambda r: r["time_ratio"])
        out.append(
            f"Measured backward:forward time ranges from {rows[0]['time_ratio']:.2f} "
            f"({rows[0]['model']}, {rows[0]['device']}) to {rows[-1]['time_ratio']:.2f} "
            f"({rows[-1]['model']}, {rows[-1]['device']}).")
    top = Counter()
    for key in {(r["device"], r["model"], r["batch"]) for r in t.layer_types}:
        rows = [r for r in t.layer_types if (r["device"], r["model"], r["batch"]) == key
                and r["phase"] == "backward" and r["time_s"]]
        if rows:
            top[max(rows, key=lambda r: r["time_s"])["layer_type"]] += 1
    if top:
        out.append("Layer type with the most backward time: " + ", ".join(
            f"{layer} in {n} model{'s' if n > 1 else ''}" for layer, n in top.most_common()) + ".")
    return out


def failure_findings(t: StudyTables) -> list[str]:
    return [f"{f['model']} at batch {f['batch']} on {f['device']} ({f['phase']}) failed: "
            f"{f['error'][:200]}" for f in t.failures]


def findings(t: StudyTables) -> list[str]:
    return (bound_findings(t) + predictor_findings(t) + accuracy_findings(t) + gap_findings(t)
            + batch_findings(t)
            + training_findings(t) + failure_findings(t))
