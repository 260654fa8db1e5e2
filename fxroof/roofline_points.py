"""Points for roofline figures, from annotated graphs or from their saved JSON.

A point's x is operational intensity (FLOP/byte); its y is the measured FLOP/s when the
source carries timings (achieved), else the attainable FLOP/s on each chosen chip. A part's
bubble (a layer type's, a node's) is its share of the measured time, else of the expected
device time on the chip (fxroof.time_model): the roof puts each part at its ceiling, and its
share of the roof time would hide the parts that run furthest below it.
"""
from __future__ import annotations

from typing import Optional

from fxroof import export, interactive, plots, rollups
from fxroof.analysis import analyze
from fxroof.chips import Chip, load_chips, resolve_chip
from fxroof.errors import FxroofError
from fxroof.graph import AnnotatedGraph
from fxroof.prediction import device_seconds
from fxroof.roofline import node_roof
from fxroof.time_model import node_time
from fxroof.units import peak_key


def load_sources(specs: list, batches: list[int], backward: bool, dtype,
                 **target) -> list[dict]:
    """[{name, batch, records, dtype, view}] from AnnotatedGraphs, JSON exports or by analysing
    model specs (each spec at every batch size; ``target``: analyze's device=, amp=,
    reparameterize=, compiled= and freeze=)."""
    sources = []
    for spec in specs:
        if isinstance(spec, AnnotatedGraph):  # already analysed (and perhaps timed)
            sources.append({"name": spec.model.name, "batch": spec.model.batch,
                            "records": spec.records(), "dtype": _roof_dtype(spec.model.as_dict()),
                            "view": spec.model.view})
            continue
        if not isinstance(spec, str):
            raise FxroofError(f"Cannot place {type(spec).__name__} on a roofline: give an "
                              "AnnotatedGraph (fxroof.analyze), a saved .json or a model name.")
        if spec.endswith(".json"):
            data = export.read_json(spec)
            sources.append({"name": data["model"]["name"], "batch": data["model"]["batch"],
                            "records": data["nodes"], "dtype": _roof_dtype(data["model"]),
                            "view": data["model"].get("view", "eager")})
            continue
        for batch in batches:
            g = analyze(spec, batch=batch, backward=backward, dtype=dtype, **target)
            sources.append({"name": g.model.name, "batch": batch, "records": g.records(),
                            "dtype": _roof_dtype(g.model.as_dict()), "view": g.model.view})
    return sources


def _roof_dtype(model: dict) -> str:
    """The dtype whose roof a figure draws: autocast's precision where the step ran under
    autocast (its matmuls and convolutions do; parameters stay fp32), else the model's."""
    return {"fp16": "float16", "bf16": "bfloat16"}.get(model.get("amp"), model["dtype"])


def roof_dtype(sources: list[dict]) -> str:
    return peak_key(sources[0]["dtype"])


def traffic_note(sources: list[dict]) -> str:
    """What a figure's intensities divide by: the eager graph's unfused traffic, the compiled
    view's kernels' buffers (Inductor's fusion), or each where a figure holds both."""
    views = {s.get("view", "eager") for s in sources}
    if views == {"compiled"}:
        return "intensity = FLOPs / bytes moved (Inductor's kernels: fused traffic)"
    if "compiled" in views:
        return ("intensity = FLOPs / bytes moved (eager: unfused traffic; compiled: "
                "Inductor's kernels)")
    return "intensity = FLOPs / bytes moved (unfused eager traffic model)"


def _point(label, group, rows, chip) -> dict:
    """A point for ``rows`` (one model, layer type or node) on ``chip``: where it sits, and
    what an interactive page shows on hover (FLOPs, bytes, time, % of roof)."""
    total = rollups.total(rows)
    if not total["bytes"] or not total["flops"]:
        return {}
    roof_s = sum(node_roof(r, chip).predicted_s for r in rows)  # the roof time: the ceiling
    timed = total.get("time_s")
    time_s, kind = (timed, "measured") if timed else (roof_s, f"roof time on {chip.id}")
    return {"label": label, "group": group, "intensity": total["flops"] / total["bytes"],
            # attainable of the whole = FLOPs / sum of per-node roof times; achieved when timed
            "flops_per_s": total["flops"] / time_s, "how": "achieved" if timed else chip.id,
            "flops": total["flops"], "bytes": total["bytes"], "time_s": time_s,
            "time_kind": kind, "pct_of_roof": 100 * roof_s / time_s, "chip": chip.name}


def _model_points(sources: list[dict], chips: list) -> list[dict]:
    result = []
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
    for p in result:
        p["group_name"] = "batch"
    return result


def _part_points(source: dict, chip, by: str) -> tuple[list, list]:
    """(points, bubble sizes) of one model's layer types or nodes on one chip."""
    if by == "layer_type":
        groups = {}
        for r in source["records"]:
            groups.setdefault(r["layer_type"], []).append(r)
        parts = list(groups.items())
    else:
        parts = [(r["name"], [r]) for r in source["records"]]
    result, bubbles = [], []
    for name, rows in parts:
        first = rows[0]
        p = _point(name, first["layer_type"] if by == "node" else "layer type", rows, chip)
        if p:
            p.update(group_name="layer type", layer_type=first["layer_type"])
            if by == "node":
                p.update(module=first["module"] or "(root)", phase=first["phase"])
            result.append(p)
            bubbles.append(_bubble_s(rows, chip))
    total = sum(bubbles)
    return result, [20 + 2000 * s / total for s in bubbles] if total else []


def _bubble_s(rows: list[dict], chip) -> float:
    """Seconds a part's bubble stands for: its measured time, else its nodes' expected
    device time on ``chip`` (the kernels, the host's issuing overlapped)."""
    timed = rollups.total(rows).get("time_s")
    return timed if timed else sum(device_seconds(node_time(r, chip)) for r in rows)


def points(sources: list[dict], chips: list, by: str):
    """(points, bubble sizes or None, title)."""
    if by == "model":
        return _model_points(sources, chips), None, (
            "Models on the rooflines (position: attainable on each chip, or achieved when "
            "timed)")
    if len(sources) != 1:
        raise FxroofError(f"--by {by} places the parts of one model: give one model and one "
                          "batch size.")
    source, chip = sources[0], chips[0]
    found, sizes = _part_points(source, chip, by)
    timed = rollups.total(source["records"]).get("time_s")
    return found, sizes, (f"{source['name']} b{source['batch']} by {by.replace('_', ' ')} on "
                          f"{chip.name} (bubble area: share of "
                          f"{'time' if timed else 'expected time'})")


def plot_roofline(models: list, chips: list, out: str, by: str = "model",
                  batches: tuple = (1,), backward: bool = False, dtype=None,
                  overwrite: bool = False, device: Optional[str] = None,
                  amp: Optional[str] = None, reparameterize: bool = False,
                  compiled: bool = False, freeze: bool = False) -> str:
    """Draw ``models`` on the rooflines of ``chips`` and save the figure at ``out`` (.png,
    .svg, ...; or .html: an interactive page, hover for each point's costs and time, menus
    to filter nodes by phase and layer type); returns the path.

    models: AnnotatedGraphs, JSON exports (`fxroof annotate --json`) or model names (or one
        of them alone), which are analysed at each of ``batches``. A graph that was timed is
        placed at its achieved FLOP/s, the others at their attainable FLOP/s on each chip.
    chips: Chips or chip ids (``fxroof chips list``), or one alone.
    by: "model" (one point per model and batch), or "layer_type" / "node" for the parts of
        one model as bubbles whose area is their share of time, on the first chip.
    device, amp: the target and autocast model names are analysed for (as ``analyze``);
        each node sits under the roof of its own dtype.
    reparameterize: model names are analysed fused for inference (as ``analyze``).
    compiled, freeze: model names are analysed in the compiled view, Inductor's kernels as
        the points (as ``analyze``); their intensities divide by the fused kernels' bytes.
    """
    if by not in ("model", "layer_type", "node"):
        raise FxroofError(f"by={by!r}: choose 'model', 'layer_type' or 'node'.")
    # one model or one chip may be given as it is
    models = [models] if isinstance(models, (str, AnnotatedGraph)) else models
    chips = [chips] if isinstance(chips, (str, Chip)) else chips
    if not models or not chips:
        raise FxroofError("plot_roofline needs at least one model and one chip.")
    page = interactive.is_page(out)
    (interactive.check_page if page else plots.check_figure)(out, overwrite)
    known = load_chips() if any(isinstance(c, str) for c in chips) else {}
    selected = [resolve_chip(c, known) for c in chips]
    sources = load_sources(list(models), list(batches), backward, dtype, device=device,
                           amp=amp, reparameterize=reparameterize, compiled=compiled,
                           freeze=freeze)
    found, sizes, title = points(sources, selected, by)
    if page:
        return interactive.write_page(interactive.figure(
            found, selected, roof_dtype(sources), title, sizes), out, overwrite)
    return plots.plot_points(found, selected, out, roof_dtype(sources), overwrite=overwrite,
                             title=title, sizes=sizes, note=traffic_note(sources))
