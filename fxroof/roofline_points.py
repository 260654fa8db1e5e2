"""Points for roofline figures, from annotated graphs or from their saved JSON.

A point's x is operational intensity (FLOP/byte); its y is the measured FLOP/s when the
source carries timings (achieved), else the attainable FLOP/s on each chosen chip.
"""
from __future__ import annotations

from fxroof import export, plots, rollups
from fxroof.analysis import analyze
from fxroof.chips import get_chip, load_chips
from fxroof.errors import FxroofError
from fxroof.graph import AnnotatedGraph
from fxroof.roofline import node_roof
from fxroof.units import peak_key


def load_sources(specs: list, batches: list[int], backward: bool, dtype) -> list[dict]:
    """[{name, batch, records, dtype}] from AnnotatedGraphs, JSON exports or by analysing
    model specs (each spec at every batch size)."""
    sources = []
    for spec in specs:
        if isinstance(spec, AnnotatedGraph):  # already analysed (and perhaps timed)
            sources.append({"name": spec.model.name, "batch": spec.model.batch,
                            "records": spec.records(), "dtype": spec.model.dtype})
            continue
        if not isinstance(spec, str):
            raise FxroofError(f"Cannot place {type(spec).__name__} on a roofline: give an "
                              "AnnotatedGraph (fxroof.analyze), a saved .json or a model name.")
        if spec.endswith(".json"):
            data = export.read_json(spec)
            sources.append({"name": data["model"]["name"], "batch": data["model"]["batch"],
                            "records": data["nodes"], "dtype": data["model"]["dtype"]})
            continue
        for batch in batches:
            g = analyze(spec, batch=batch, backward=backward, dtype=dtype)
            sources.append({"name": g.model.name, "batch": batch, "records": g.records(),
                            "dtype": g.model.dtype})
    return sources


def roof_dtype(sources: list[dict]) -> str:
    return peak_key(sources[0]["dtype"])


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
            name, group = f"{s['name']} b{s['batch']}", f"batch {s['batch']}"
            if rollups.total(s["records"]).get("time_s"):
                # achieved FLOP/s is where it was timed, one point whatever the chips drawn
                labelled = [(f"{name} (measured)", chips[0])]
            else:
                labelled = [(name + (f" ({chip.id})" if len(chips) > 1 else ""), chip)
                            for chip in chips]
            result += [p for p in (_point(label, group, s["records"], chip)
                                   for label, chip in labelled) if p]
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


def plot_roofline(models: list, chips: list, out: str, by: str = "model",
                  batches: tuple = (1,), backward: bool = False, dtype=None,
                  overwrite: bool = False) -> str:
    """Draw ``models`` on the rooflines of ``chips`` and save the figure at ``out`` (.png or
    .svg); returns the path.

    models: AnnotatedGraphs, JSON exports (`fxroof annotate --json`) or model names, which
        are analysed at each of ``batches``. A graph that was timed is placed at its achieved
        FLOP/s, the others at their attainable FLOP/s on each chip.
    chips: Chips or chip ids (``fxroof chips list``).
    by: "model" (one point per model and batch), or "layer_type" / "node" for the parts of
        one model as bubbles whose area is their share of time, on the first chip.
    """
    if by not in ("model", "layer_type", "node"):
        raise FxroofError(f"by={by!r}: choose 'model', 'layer_type' or 'node'.")
    if not models or not chips:
        raise FxroofError("plot_roofline needs at least one model and one chip.")
    plots.check_figure(out, overwrite)
    known = load_chips() if any(isinstance(c, str) for c in chips) else {}
    selected = [get_chip(c, known) if isinstance(c, str) else c for c in chips]
    sources = load_sources(list(models), list(batches), backward, dtype)
    found, sizes, title = points(sources, selected, by)
    return plots.plot_points(found, selected, out, roof_dtype(sources), overwrite=overwrite,
                       title=title, sizes=sizes)
