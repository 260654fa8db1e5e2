"""Roofline figures. One style for every figure fxroof draws: log-log axes with units, the
dtype in the legend, legends outside the data, labels nudged apart so they do not overlap.
Functions take plain data (chips, rows) and a path; nothing here computes a cost.
"""
from __future__ import annotations

import os
from typing import Optional

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fxroof.chips import Chip  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.export import check_writable  # noqa: E402

STYLE = {"figure.figsize": (10, 6.5), "figure.dpi": 110, "font.size": 9,
         "axes.grid": True, "grid.alpha": 0.3, "axes.titlesize": 11}
INTENSITY = np.logspace(-2, 4, 400)  # FLOP/byte


def _roof_key(chip: Chip, dtype: str) -> Optional[str]:
    """The matrix-engine peak for this dtype if the chip has one, else its plain peak."""
    for key in (f"{dtype}_matrix", "tf32" if dtype == "tf32" else dtype):
        if key in chip.peaks:
            return key
    return None


def new_axes(title: str, xlabel: str = "operational intensity (FLOP/byte)",
             ylabel: str = "attainable performance (FLOP/s)", log: str = "xy",
             nrows: int = 1, ncols: int = 1, size: Optional[tuple] = None):
    """A figure in fxroof's style; ``log`` names the log-scaled axes. With several panels,
    returns (fig, array of axes) and the labels apply to each."""
    with plt.rc_context({**STYLE, **({"figure.figsize": size} if size else {})}):
        fig, axes = plt.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat:
        if "x" in log:
            ax.set_xscale("log")
        if "y" in log:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    if nrows * ncols == 1:
        axes[0, 0].set_title(title)
        return fig, axes[0, 0]
    fig.suptitle(title)
    return fig, axes


def save(fig, path: str, overwrite: bool) -> None:
    check_writable(path, overwrite)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def draw_roofs(ax, chips: list[Chip], dtype: str) -> dict:
    """One roof per chip: min(peak, bandwidth x intensity). For fp32 on a GPU whose
    convolutions PyTorch runs in TF32 (cuDNN's default), the TF32 tensor-core roof that fxroof's
    predictions use for convolutions is drawn too, dashed. Returns chip id -> colour."""
    import torch

    colours = {}
    cmap = plt.get_cmap("tab20")
    drawn = [c for c in chips if _roof_key(c, dtype) is not None]
    for i, chip in enumerate(drawn):
        key = _roof_key(chip, dtype)
        roof = np.minimum(chip.peaks[key], chip.bandwidth * INTENSITY)
        # 20 colours, then the same colours dash-dotted: no two roofs look alike (plain
        # dashes are kept for the TF32 roofs below)
        (line,) = ax.plot(INTENSITY, roof, color=cmap(i % 20), lw=1.6,
                          ls="-" if i < 20 else "-.",
                          label=f"{chip.name} [{key}, {chip.bandwidth / 1e9:.0f} GB/s]")
        colours[chip.id] = line.get_color()
        if dtype == "fp32" and chip.cls == "gpu" and "tf32" in chip.peaks \
                and torch.backends.cudnn.allow_tf32:
            ax.plot(INTENSITY, np.minimum(chip.peaks["tf32"], chip.bandwidth * INTENSITY),
                    color=line.get_color(), lw=1.2, ls="--",
                    label=f"{chip.name} [tf32 tensor cores: fp32 convolutions]")
    return colours


def plot_chips(chips: list[Chip], path: str, dtype: str = "fp32", overwrite: bool = False,
               title: Optional[str] = None) -> str:
    plotted = [c for c in chips if _roof_key(c, dtype)]
    if not plotted:
        raise FxroofError(f"No chip lists a {dtype} peak; choose another --dtype.")
    fig, ax = new_axes(title or f"Rooflines, dense {dtype} peaks (matrix engine where the chip "
                                 "has one)")
    draw_roofs(ax, plotted, dtype)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    save(fig, path, overwrite)
    return path


def plot_chips_by_class(chips: list[Chip], path: str, dtype: str = "fp32",
                        overwrite: bool = False) -> list[str]:
    """The all-chip plot at ``path`` plus one per class beside it (name-<class>.ext)."""
    written = [plot_chips(chips, path, dtype, overwrite)]
    root, ext = os.path.splitext(path)
    for cls in sorted({c.cls for c in chips}):
        members = [c for c in chips if c.cls == cls and _roof_key(c, dtype)]
        if members:
            written.append(plot_chips(members, f"{root}-{cls}{ext}", dtype, overwrite,
                                      title=f"{cls.upper()} rooflines, dense {dtype} peaks"))
    return written


def plot_points(points: list[dict], chips: list[Chip], path: str, dtype: str = "fp32",
                overwrite: bool = False, title: str = "", sizes: Optional[list] = None) -> str:
    """Points {label, intensity, flops_per_s, group} on the chips' roofs, coloured by group
    (e.g. batch size); optional bubble sizes (area proportional to a time share)."""
    fig, ax = new_axes(title)
    draw_roofs(ax, chips, dtype)
    groups = sorted({p["group"] for p in points}, key=str)
    cmap = plt.get_cmap("viridis", max(len(groups), 2))
    for gi, group in enumerate(groups):
        members = [p for p in points if p["group"] == group]
        xs = [p["intensity"] for p in members]
        ys = [p["flops_per_s"] for p in members]
        area = [sizes[points.index(p)] for p in members] if sizes else 36
        ax.scatter(xs, ys, s=area, color=cmap(gi), alpha=0.75, edgecolor="black", lw=0.5,
                   label=str(group), zorder=3)
    place_labels(ax, points)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
                       title="roofs and points")
    for handle in legend.legend_handles:  # bubble sizes are data, not legend entries
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([36])
    ax.text(0.01, 0.01, "model intensity = total FLOPs / total bytes moved (unfused eager "
            "traffic model)", transform=ax.transAxes, fontsize=7, alpha=0.7)
    save(fig, path, overwrite)
    return path


def place_labels(ax, points: list[dict], x: str = "intensity", y: str = "flops_per_s",
                 fontsize: int = 7) -> None:
    """Label each point (its ``label``), moving a label up in steps until its box (in display
    pixels, from the text's length) overlaps no label already placed."""
    fig = ax.figure
    fig.canvas.draw()  # fix the axis limits so data -> pixel transforms are final
    char_w, line_h = fontsize * 0.62 * fig.dpi / 72, fontsize * 1.3 * fig.dpi / 72
    boxes: list = []
    for p in sorted(points, key=lambda q: (q[x], q[y])):
        px, py = ax.transData.transform((p[x], p[y]))
        width = char_w * len(p["label"])
        dy = 3.0
        while any(px + 5 < bx + bw and bx < px + 5 + width and py + dy < by + line_h
                  and by < py + dy + line_h for bx, by, bw in boxes):
            dy += line_h
        boxes.append((px + 5, py + dy, width))
        ax.annotate(p["label"], (p[x], p[y]), xytext=(5, dy * 72 / fig.dpi),
                    textcoords="offset points", fontsize=fontsize,
                    arrowprops={"arrowstyle": "-", "lw": 0.4, "alpha": 0.5} if dy > 3 else None)
