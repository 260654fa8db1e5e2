"""Points for roofline figures, from annotated graphs or from their saved JSON.

A point's x is operational intensity (FLOP/byte); its y is the measured FLOP/s when the
source carries timings (achieved), else the attainable FLOP/s on each chosen chip.
"""
from __future__ import annotations

import json
import os

from fxroof import rollups
from fxroof.errors import FxroofError
from fxroof.roofline import DTYPE_KEYS, node_roof


def load_sources(specs: list[str], batches: list[int], backward: bool, dtype) -> list[dict]:
    """[{name, batch, records, dtype}] from JSON exports or by analysing model specs."""
    import fxroof

    sources = []
    for spec in specs:
        if spec.endswith(".json"):
            if not os.path.exists(spec):
                raise FxroofError(f"No such file '{spec}': pass a JSON written by "
                                  "`fxroof annotate --json` or a model name.")
            with open(spec) as f:
                data = json.load(f)
            if data.get("schema_version") != 1 or "nodes" not in data:
                raise FxroofError(f"'{spec}' is not an fxroof annotation (schema_version 1).")
            sources.append({"name": data["model"]["name"], "batch": data["model"]["batch"],
                            "records": data["nodes"], "dtype": data["model"]["dtype"]})
            continue
        for batch in batches:
            g = fxroof.analyze(spec, batch=batch, backward=backward, dtype=dtype)
            sources.append({"name": g.model.name, "batch": batch, "records": g.records(),
                            "dtype": g.model.dtype})
    return sources


def roof_dtype(sources: list[dict]) -> str:
    return DTYPE_KEYS.get(sources[0]["dtype"], "fp32")


def _point(label, group, rows, chip) -> dict:
    total = rollups.total(rows)
    if not total["bytes"] or not total["flops"]:
        return {}
    timed = total.get("time_s")
    if timed:
        y, how = total["flops"] / timed, "achieved"
    else:  # attainable of the whole = FLOPs / sum of per-node predicted times
        y = total["flops"] / sum(node_roof(r, chip).predicted_s for r in rows)
        how = chip.id
    return {"label": label, "group": group, "intensity": total["flops"] / total["bytes"],
            "flops_per_s": y, "how": how}


def points(sources: list[dict], chips: list, by: str):
    """(points, bubble sizes or None, title)."""
    result, sizes = [], None
    if by == "model":
        for s in sources:
            for chip in chips:
                p = _point(f"{s['name']} b{s['batch']}" + (f" ({chip.id})" if len(chips) > 1
                                                            else ""),
                           f"batch {s['batch']}", s["records"], chip)
                if p:
                    result.append(p)
        return result, None, "Models on the rooflines (position: attainable on each chip, or " \
                             "achieved when timed)"
    if len(sources) != 1:
        raise FxroofError(f"--by {by} places the parts of one model: give one model and one "
                          "batch size.")
    source, chip = sources[0], chips[0]
    if by == "layer_type":
        groups = {}
        for r in source["records"]:
            groups.setdefault(r["layer_type"], []).append(r)
        parts = [(name, rows) for name, rows in groups.items()]
    else:
        parts = [(r["name"], [r]) for r in source["records"]]
    times = []
    for name, rows in parts:
        p = _point(name, rows[0]["phase"] if by == "node" else "layer type", rows, chip)
        if p:
            result.append(p)
            times.append(sum(r["time_s"] if r.get("time_s") else node_roof(r, chip).predicted_s
                             for r in rows))
    share = [t / sum(times) for t in times] if times else []
    sizes = [20 + 2000 * s for s in share]
    return result, sizes, (f"{source['name']} b{source['batch']} by {by.replace('_', ' ')} on "
                           f"{chip.name} (bubble area: share of time)")
