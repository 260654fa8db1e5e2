"""The study's figures, drawn from its tables with fxroof.plots' style and helpers. Each function
writes one file under ``figures/`` and returns its path; data behind each lives in ``data/``."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
from matplotlib.ticker import EngFormatter, NullFormatter

from fxroof import interactive, plots
from fxroof.files import file_safe
from fxroof.units import si
from fxroof.study.tables import MIN_SPEARMAN_POINTS, StudyTables, spearman

COST_PANELS = [("flops", "FLOPs (FLOP)"), ("parameters", "parameters (count)"),
               ("weight_bytes", "weights (bytes)"), ("activation_bytes", "activations (bytes)"),
               ("peak_bytes", "peak memory, inference (bytes)"),
               ("train_peak_bytes", "peak memory, training step (bytes)"),
               ("bytes", "bytes moved (bytes)"), ("intensity", "intensity (FLOP/byte)")]
PIE_SLICES = 6  # layer types shown; the rest are "other"


def _engineering_ticks(axis, unit: str = "") -> None:
    """Log-axis ticks as 10k, 1M, 1G (or 20 ms): major ticks only, so labels never collide."""
    axis.set_major_formatter(EngFormatter(unit=unit, sep=" " if unit else ""))
    axis.set_minor_formatter(NullFormatter())


def _batch_colours(batches):
    cmap = plots.colormap("viridis", max(len(batches), 2))
    return {b: cmap(i) for i, b in enumerate(batches)}


def _legend_outside(ax, **kwargs):
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, **kwargs)


def chip_rooflines(t: StudyTables, shipped: list, folder: str) -> list[str]:
    """All chips and one plot per class, in fp32, bf16 and fp16 (one dtype per plot: their
    peaks are not comparable; Groq, Cerebras and Wormhole publish fp16 only), with this
    study's measured roofs among them."""
    chips = shipped + list(t.chips.values())
    return [path for name, dtype in (("chips.png", "fp32"), ("chips-bf16.png", "bf16"),
                                      ("chips-fp16.png", "fp16"))
            for path in plots.plot_chips_by_class(chips, os.path.join(folder, name), dtype,
                                                  overwrite=True)]


def model_costs(t: StudyTables, folder: str) -> str:
    device, batch = t.config.devices[0], t.batches(t.config.devices[0])[0]
    rows = sorted((r for r in t.rows if r["device"] == device and r["batch"] == batch),
                  key=lambda r: r["flops"])
    fig, axes = plots.new_axes(f"What each model costs, batch {batch}, inference (eval "
                               "forward), fp32", xlabel="", ylabel="", log="x", nrows=2,
                               ncols=4, size=(16, 8))
    names = [r["model"] for r in rows]
    for ax, (key, label) in zip(axes.flat, COST_PANELS, strict=True):
        values = [r[key] for r in rows]
        known = [v for v in values if v]
        if not known:  # e.g. every training step failed at this batch
            ax.set_axis_off()
            ax.set_title(f"{label}: no data", fontsize=9)
            continue
        low = min(known) / 4
        ax.barh(names, [v or low for v in values], color="tab:blue", alpha=0.8)
        ax.set_xlim(low, max(known) * 6)  # room for the value labels
        for i, value in enumerate(values):
            text = "failed" if value is None else \
                f"{value:.3g}" if key == "intensity" else si(value, "")
            ax.annotate(text, (value or low, i), xytext=(3, -3), textcoords="offset points",
                        fontsize=7)
        _engineering_ticks(ax.xaxis)
        ax.set_xlabel(label)
        ax.tick_params(axis="y", labelsize=7)
    path = os.path.join(folder, "models-cost.png")
    plots.save(fig, path, overwrite=True)
    return path


def models_on_roofline(t: StudyTables, folder: str, achieved: bool) -> list[str]:
    """Each model on this device's measured roof, one figure per batch size (17 labelled
    points stay readable; 70 do not): at its attainable FLOP/s, or at the FLOP/s it achieved
    (FLOPs / measured latency)."""
    written = []
    key = "achieved_flops_per_s" if achieved else "attainable_flops_per_s"
    what = "achieved (FLOPs / measured latency)" if achieved else "attainable (roofline)"
    for device, chip in t.chips.items():
        for batch in t.batches(device):
            points = [{"label": r["model"], "group": f"batch {batch}",
                       "intensity": r["intensity"], "flops_per_s": r[key]}
                      for r in t.rows if r["device"] == device and r["batch"] == batch and r[key]]
            if not points:
                continue
            path = os.path.join(folder, f"{'achieved' if achieved else 'models'}-roofline-"
                                        f"{device.replace(':', '_')}-b{batch}.png")
            plots.plot_points(points, [chip], path, "fp32", overwrite=True,
                              title=f"Batch {batch} on the measured roof of {chip.name}: "
                                    f"inference, {what}")
            written.append(path)
    return written


def _study_points(t: StudyTables, device: str, chip) -> list[dict]:
    """Each (model, batch) twice: at its attainable FLOP/s on the measured roof, and at the
    FLOP/s its measured latency achieved."""
    points = []
    for r in (r for r in t.rows if r["device"] == device and r["attainable_flops_per_s"]):
        base = {"label": f"{r['model']} b{r['batch']}", "group": f"batch {r['batch']}",
                "group_name": "batch", "intensity": r["intensity"], "flops": r["flops"],
                "bytes": r["bytes"], "chip": chip.name}
        points.append({**base, "phase": "attainable (roofline)", "pct_of_roof": 100.0,
                       "flops_per_s": r["attainable_flops_per_s"], "time_kind": "roof time",
                       "time_s": r["flops"] / r["attainable_flops_per_s"]})
        if r["achieved_flops_per_s"]:
            points.append({**base, "phase": "achieved (measured)",
                           "flops_per_s": r["achieved_flops_per_s"], "time_s": r["latency_s"],
                           "time_kind": "measured, median", "pct_of_roof":
                               r["pct_of_attainable"]})
    return points


def interactive_rooflines(t: StudyTables) -> list[str]:
    """Per device, one interactive roofline (HTML <div>) with every model and batch, at its
    attainable and at its achieved FLOP/s; hover for the numbers, menus to filter."""
    divs = []
    for device, chip in t.chips.items():
        points = _study_points(t, device, chip)
        if points:
            fig = interactive.figure(points, [chip], "fp32", f"Models on the measured roof of "
                                     f"{chip.name}, inference: attainable and achieved",
                                     phase_name="position")
            divs.append(interactive.figure_div(fig, f"roofline-{file_safe(device)}"))
    return divs


def latency_scatter(t: StudyTables, x: str, xlabel: str, folder: str) -> str:
    devices = [d for d in t.chips if any(r["latency_s"] for r in t.rows if r["device"] == d)]
    fig, axes = plots.new_axes(f"Inference latency vs {xlabel.split(' (')[0]}", xlabel=xlabel,
                               ylabel="latency, median (s)", nrows=1, ncols=max(len(devices), 1),
                               size=(10 * max(len(devices), 1), 6.5))
    colours = _batch_colours(t.batches())
    for ax, device in zip(np.atleast_1d(axes).flat, devices, strict=False):
        rows = [r for r in t.rows if r["device"] == device and r["latency_s"]]
        for batch in t.batches(device):
            members = [r for r in rows if r["batch"] == batch]
            ax.scatter([r[x] for r in members], [r["latency_s"] for r in members],
                       color=colours[batch], edgecolor="black", lw=0.5, label=f"batch {batch}",
                       zorder=3)
        ax.set_title(f"Inference latency vs {xlabel.split(' (')[0]} on {device}")
        _engineering_ticks(ax.xaxis)
        _engineering_ticks(ax.yaxis, "s")
        _legend_outside(ax)
    for ax, device in zip(np.atleast_1d(axes).flat, devices, strict=False):
        rows = [r for r in t.rows if r["device"] == device and r["latency_s"]]
        plots.place_labels(ax, [{"label": r["model"], "x": r[x], "y": r["latency_s"]}
                                for r in rows], x="x", y="y")
    path = os.path.join(folder, f"latency-vs-{x}.png")
    plots.save(fig, path, overwrite=True)
    return path


def throughput(t: StudyTables, folder: str) -> str:
    devices = list(t.chips)
    fig, axes = plots.new_axes("Throughput vs batch size (inference)", xlabel="batch size",
                               ylabel="throughput (images/s)", nrows=1, ncols=len(devices),
                               size=(10 * len(devices), 6.5))
    for ax, device in zip(np.atleast_1d(axes).flat, devices, strict=True):
        for i, model in enumerate(t.config.models):
            rows = sorted((r for r in t.rows if r["device"] == device and r["model"] == model
                           and r["throughput_per_s"]), key=lambda r: r["batch"])
            if rows:
                ax.plot([r["batch"] for r in rows], [r["throughput_per_s"] for r in rows],
                        label=model, **plots.series_style(i))
        ax.set_title(f"Throughput vs batch size (inference) on {device}")
        ax.set_xticks(t.batches(device), [str(b) for b in t.batches(device)])
        ax.xaxis.set_minor_formatter(NullFormatter())
        _legend_outside(ax)
    path = os.path.join(folder, "throughput-vs-batch.png")
    plots.save(fig, path, overwrite=True)
    return path


def correlation_matrices(t: StudyTables, folder: str) -> str:
    panels = [("all batch sizes", spearman(t))] + [(f"batch {b}", spearman(t, b))
                                                   for b in t.batches()]
    skipped = [f"{title} (n = {result['n']})" for title, result in panels
               if result["rho"] is None]
    panels = [(title, result) for title, result in panels if result["rho"] is not None]
    ncols = min(max(len(panels), 1), 3)
    nrows = -(-max(len(panels), 1) // ncols)
    fig, axes = plots.new_axes("Spearman rank correlation", xlabel="", ylabel="", log="",
                               nrows=nrows, ncols=ncols, size=(5.5 * ncols, 5.2 * nrows))
    for ax in list(np.atleast_1d(axes).flat)[len(panels):]:
        ax.set_axis_off()
    for ax, (title, result) in zip(np.atleast_1d(axes).flat, panels, strict=False):
        names = result["variables"]
        ax.imshow(result["rho"], cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.grid(False)
        for i, row in enumerate(result["rho"]):
            for j, value in enumerate(row):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(value) > 0.6 else "black")
        ax.set_title(f"{title} (n = {result['n']})")
    if skipped or not panels:
        fig.text(0.5, 0.01 if panels else 0.5, "Not drawn, fewer than "
                 f"{MIN_SPEARMAN_POINTS} (model, batch) points: " + ", ".join(skipped)
                 + " (a rank correlation over so few points cannot tell order from chance)",
                 ha="center", fontsize=8, wrap=True)
    path = os.path.join(folder, "spearman.png")
    plots.save(fig, path, overwrite=True)
    return path


def training(t: StudyTables, folder: str) -> str:
    rows = sorted(t.train, key=lambda r: (r["device"], r["forward_flops"]))
    labels = [f"{r['model']} b{r['batch']} {r['device']}" if len(t.chips) > 1 else
              f"{r['model']} b{r['batch']}" for r in rows]
    fig, axes = plots.new_axes("Training step: forward and backward", xlabel="", ylabel="",
                               log="x", nrows=1, ncols=2, size=(15, 0.35 * len(rows) + 2.5))
    y = np.arange(len(rows))
    for ax, (fw, bw, ratio, unit) in zip(axes.flat, [
            ("forward_flops", "backward_flops", "flops_ratio", "FLOPs (FLOP)"),
            ("forward_s", "backward_s", "time_ratio", "measured time, eager, median (s)")],
            strict=True):
        ax.barh(y - 0.2, [r[fw] for r in rows], 0.4, label="forward", color="tab:blue")
        ax.barh(y + 0.2, [r[bw] for r in rows], 0.4, label="backward", color="tab:orange")
        for i, r in enumerate(rows):
            ax.annotate(f"bw:fw {r[ratio]:.2f}", (max(r[fw], r[bw]), i), xytext=(4, -3),
                        textcoords="offset points", fontsize=7)
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_xlabel(unit)
        _engineering_ticks(ax.xaxis, "s" if ratio == "time_ratio" else "")
        ax.margins(x=0.25)
        _legend_outside(ax)
    path = os.path.join(folder, "training-fw-bw.png")
    plots.save(fig, path, overwrite=True)
    return path


def compiled_speedups(t: StudyTables, folder: str) -> str:
    """Predicted vs measured speed-up of torch.compile over eager, per model and batch: on
    the diagonal the compiled view predicted what Inductor delivered."""
    rows = [r for r in t.compiled if r["measured_speedup"]]
    fig, ax = plots.new_axes("torch.compile vs eager on the CPU: predicted and measured "
                             "speed-up", xlabel="predicted speed-up (eager / compiled time)",
                             ylabel="measured speed-up (eager / compiled latency)")
    colours = _batch_colours(t.batches())
    for batch in sorted({r["batch"] for r in rows}):
        mine = [r for r in rows if r["batch"] == batch]
        ax.scatter([r["predicted_speedup"] for r in mine], [r["measured_speedup"] for r in mine],
                   color=colours[batch], edgecolor="black", lw=0.5, label=f"batch {batch}",
                   zorder=3)
    values = [v for r in rows for v in (r["predicted_speedup"], r["measured_speedup"])] or [1]
    low, high = min(values) / 1.3, max(values) * 1.3
    ax.plot([low, high], [low, high], color="grey", lw=0.8, ls="--", label="predicted = measured")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    _legend_outside(ax)
    plots.place_labels(ax, [{"label": f"{r['model']} b{r['batch']}", "x": r["predicted_speedup"],
                             "y": r["measured_speedup"]} for r in rows], x="x", y="y")
    path = os.path.join(folder, "compiled-speedup.png")
    plots.save(fig, path, overwrite=True)
    return path


def _pie(ax, rows, key, title, colours):
    rows = sorted((r for r in rows if r.get(key)), key=lambda r: -r[key])
    if not rows:
        ax.set_axis_off()
        return
    shown, rest = rows[:PIE_SLICES], rows[PIE_SLICES:]
    values = [r[key] for r in shown] + ([sum(r[key] for r in rest)] if rest else [])
    names = [r["layer_type"] for r in shown] + (["other"] if rest else [])
    ax.pie(values, labels=None, autopct=lambda p: f"{p:.0f}%" if p >= 4 else "",
           textprops={"fontsize": 7}, colors=[colours.get(n, "lightgrey") for n in names])
    ax.legend(names, loc="upper left", bbox_to_anchor=(0.9, 1.0), fontsize=7, frameon=False)
    ax.set_title(title, fontsize=9)


def _layer_colours(rows) -> dict:
    """One colour per layer type across every pie of the study, the most common first, so the
    same layer type looks the same in every figure; rare ones share grey with "other"."""
    counts = Counter(r["layer_type"] for r in rows)
    cmap = plots.colormap("tab20")
    return {name: cmap(i) for i, (name, _) in enumerate(counts.most_common(20))}


def layer_pies(t: StudyTables, folder: str) -> list[str]:
    """Per model (at each train batch): latency, FLOPs and bytes moved by layer type, forward
    and backward separately."""
    written = []
    colours = _layer_colours(t.layer_types)
    for key in sorted({(r["device"], r["model"], r["batch"]) for r in t.layer_types}):
        device, model, batch = key
        rows = [r for r in t.layer_types if (r["device"], r["model"], r["batch"]) == key]
        fig, axes = plots.new_axes(f"{model}, batch {batch}, {device}: by layer type",
                                   xlabel="", ylabel="", log="", nrows=2, ncols=3,
                                   size=(15, 8))
        for i, phase in enumerate(("forward", "backward")):
            mine = [r for r in rows if r["phase"] == phase]
            _pie(axes[i, 0], mine, "time_s", f"{phase}: measured time", colours)
            _pie(axes[i, 1], mine, "flops", f"{phase}: FLOPs", colours)
            _pie(axes[i, 2], mine, "bytes", f"{phase}: bytes moved", colours)
        path = os.path.join(folder, f"layers-{file_safe(model)}-b{batch}-"
                                    f"{file_safe(device)}.png")
        plots.save(fig, path, overwrite=True)
        written.append(path)
    return written
