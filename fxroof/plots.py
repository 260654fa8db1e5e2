"""Roofline figures. One style for every figure fxroof draws: log-log axes with units, the
dtype in the legend, legends outside the data, labels nudged apart so they do not overlap.
Functions take plain data (chips, rows) and a path; nothing here computes a cost.

Figures are made with matplotlib's object API (``Figure`` on an Agg canvas), never pyplot: the
global backend a notebook or application chose is left alone, and no figure is left open in
pyplot's registry.
"""
from __future__ import annotations

import os
import re
from typing import Optional

import matplotlib
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, NullFormatter

from fxroof.chips import Chip
from fxroof.errors import FxroofError
from fxroof.files import atomic_path, check_writable
from fxroof.units import op_unit, si

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
    with matplotlib.rc_context({**STYLE, **({"figure.figsize": size} if size else {})}):
        fig = Figure()
        FigureCanvasAgg(fig)  # draws to files only, whatever backend pyplot uses
        axes = fig.subplots(nrows, ncols, squeeze=False)
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


def colormap(name: str, n: Optional[int] = None):
    """A colormap by name, resampled to ``n`` colours when given."""
    cmap = matplotlib.colormaps[name]
    return cmap.resampled(n) if n else cmap


def check_figure(path: str, overwrite: bool) -> None:
    """Refuse, before any work, a figure path fxroof would not or could not write."""
    figure_format(path)
    check_writable(path, overwrite)


def save(fig, path: str, overwrite: bool) -> None:
    """Write the figure atomically, in the format its extension names."""
    check_figure(path, overwrite)
    fig.tight_layout()
    with atomic_path(path) as partial:
        fig.savefig(partial, bbox_inches="tight", format=figure_format(path))


def figure_format(path: str) -> str:
    """The image format a path's extension names; a clear error for one matplotlib cannot
    write (checked before any work)."""
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    known = FigureCanvasAgg.get_supported_filetypes()
    if ext not in known:
        raise FxroofError(f"Cannot write the figure '{path}': "
                          + (f"'.{ext}' is not an image format matplotlib writes"
                             if ext else "the path has no extension")
                          + f". Use one of {', '.join('.' + k for k in sorted(known))} "
                          "(.png or .svg are usual).")
    return ext


def draw_roofs(ax, chips: list[Chip], dtype: str) -> dict:
    """One roof per chip: min(peak, bandwidth x intensity). For fp32 on a GPU whose
    convolutions PyTorch runs in TF32 (cuDNN's default), the TF32 tensor-core roof that fxroof's
    predictions use for convolutions is drawn too, dashed. Returns chip id -> colour."""
    colours = {}
    cmap = colormap("tab20")
    drawn = [c for c in chips if _roof_key(c, dtype) is not None]
    for i, chip in enumerate(drawn):
        key = _roof_key(chip, dtype)
        roof = np.minimum(chip.peaks[key], chip.bandwidth * INTENSITY)
        # 20 colours, then the same colours dash-dotted: no two roofs look alike (plain
        # dashes are kept for the TF32 roofs below)
        (line,) = ax.plot(INTENSITY, roof, color=cmap(i % 20), lw=1.6,
                          ls="-" if i < 20 else "-.",
                          label=f"{chip.name} [{key}, {si(chip.bandwidth, 'B/s')}]")
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
    op = op_unit(dtype)
    fig, ax = new_axes(title or f"Rooflines, dense {dtype} peaks (matrix engine where the chip "
                                 "has one)", xlabel=f"operational intensity ({op}/byte)",
                       ylabel=f"attainable performance ({op}/s)")
    draw_roofs(ax, plotted, dtype)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    save(fig, path, overwrite)
    return path


def plot_chips_by_class(chips: list[Chip], path: str, dtype: str = "fp32",
                        overwrite: bool = False) -> list[str]:
    """The all-chip plot at ``path`` plus one per class beside it (name-<class>.ext). Every
    path is checked before the first figure is written."""
    root, ext = os.path.splitext(path)
    classes = sorted({c.cls for c in chips if _roof_key(c, dtype)})
    paths = [path] + [f"{root}-{cls}{ext}" for cls in classes]
    for each in paths:
        check_figure(each, overwrite)
    written = [plot_chips(chips, path, dtype, overwrite)]
    for cls, each in zip(classes, paths[1:], strict=True):
        members = [c for c in chips if c.cls == cls and _roof_key(c, dtype)]
        written.append(plot_chips(members, each, dtype, overwrite,
                                  title=f"{cls.upper()} rooflines, dense {dtype} peaks"))
    return written


def plot_points(points: list[dict], chips: list[Chip], path: str, dtype: str = "fp32",
                overwrite: bool = False, title: str = "", sizes: Optional[list] = None) -> str:
    """Points {label, intensity, flops_per_s, group} on the chips' roofs, coloured by group
    (e.g. batch size); optional bubble sizes (area proportional to a time share)."""
    fig, ax = new_axes(title, ylabel="performance (FLOP/s): roofs attainable, points as titled")
    draw_roofs(ax, chips, dtype)
    groups = sorted({p["group"] for p in points}, key=_natural)
    cmap = colormap("viridis", max(len(groups), 2))
    if not sizes:
        # earlier groups get larger markers, so points that coincide (batch 64 and 256 of a
        # model often share an intensity) show as concentric rings instead of hiding
        rank = {g: len(groups) - 1 - i for i, g in enumerate(groups)}
        sizes = [36 * (1 + 0.7 * rank[p["group"]]) for p in points]
    for gi, group in enumerate(groups):
        members = [i for i, p in enumerate(points) if p["group"] == group]
        ax.scatter([points[i]["intensity"] for i in members],
                   [points[i]["flops_per_s"] for i in members], s=[sizes[i] for i in members],
                   color=cmap(gi), alpha=0.75, edgecolor="black", lw=0.5, label=str(group),
                   zorder=3)
    _zoom_to(ax, points, chips, dtype)
    ax.yaxis.set_major_formatter(EngFormatter(sep=" "))  # 100 G, not 10^11 or 1 x 10^11
    ax.yaxis.set_minor_formatter(NullFormatter())
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
                       title="roofs and points")
    for handle in legend.legend_handles:  # bubble sizes are data, not legend entries
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([36])
    place_labels(ax, points, radii=[(s ** 0.5) / 2 for s in sizes])
    ax.text(0.01, 0.01, "model intensity = total FLOPs / total bytes moved (unfused eager "
            "traffic model)", transform=ax.transAxes, fontsize=7, alpha=0.7)
    save(fig, path, overwrite)
    return path


def _zoom_to(ax, points: list[dict], chips: list[Chip], dtype: str) -> None:
    """Show the points' decade range and the roofs' ridges and peaks, not 6 empty decades."""
    keys = [(c, _roof_key(c, dtype)) for c in chips]
    ridges = [c.peaks[k] / c.bandwidth for c, k in keys if k]
    peaks = [c.peaks[k] for c, k in keys if k]
    xs = [p["intensity"] for p in points] + ridges
    ys = [p["flops_per_s"] for p in points] + peaks
    ax.set_xlim(min(xs) / 5, max(xs) * 5)
    ax.set_ylim(min(ys) / 5, max(ys) * 3)


def _natural(text) -> list:
    """Sort key that puts "batch 64" before "batch 256"."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(text))]


def place_labels(ax, points: list[dict], x: str = "intensity", y: str = "flops_per_s",
                 fontsize: int = 7, radii: Optional[list] = None) -> None:
    """Label each point (its ``label``) at the nearest free spot: right, left, above or below
    the point first, then further out in growing steps, so no label box (in display pixels,
    from the text's length) overlaps another label or a marker; a leader line joins a label
    that had to move away. Call it last, once legends and other panels exist: it lays the
    figure out as `save` will, and labels are offsets fixed in points from then on."""
    fig = ax.figure
    fig.tight_layout()  # the layout `save` applies; laying out later would move the axes
    fig.canvas.draw()  # fix the axis limits so data -> pixel transforms are final
    char_w, line_h = fontsize * 0.62 * fig.dpi / 72, fontsize * 1.3 * fig.dpi / 72
    # pixels around each marker kept clear: its radius (bubbles: given in points) or 4
    clear = [r * fig.dpi / 72 for r in radii] if radii else [4.0] * len(points)
    centres = [tuple(ax.transData.transform((p[x], p[y]))) for p in points]
    taken = [(cx - r, cy - r, 2 * r, 2 * r) for (cx, cy), r in zip(centres, clear, strict=True)]

    (left, bottom), (right, top) = ax.bbox.get_points()

    def free(box):  # inside the axes, clear of every label and marker so far
        bx, by, bw, bh = box
        return left <= bx and bx + bw <= right and bottom <= by and by + bh <= top and all(
            bx + bw <= ox or ox + ow <= bx or by + bh <= oy or oy + oh <= by
            for ox, oy, ow, oh in taken)

    order = sorted(range(len(points)), key=lambda i: (points[i][x], points[i][y]))
    for i in order:
        (px, py), label = centres[i], points[i]["label"]
        width = char_w * len(label)
        gap = clear[i] + 2
        for step in range(40):
            reach = step * line_h
            candidates = [(gap, -line_h / 2 + reach), (gap, -line_h / 2 - reach),
                          (-gap - width, -line_h / 2 + reach),
                          (-gap - width, -line_h / 2 - reach)]
            spot = next(((dx, dy) for dx, dy in candidates
                         if free((px + dx, py + dy, width, line_h))), None)
            if spot is not None:
                break
        else:
            spot = (gap, -line_h / 2)
        dx, dy = spot
        taken.append((px + dx, py + dy, width, line_h))
        moved = abs(dy + line_h / 2) > line_h
        ax.annotate(label, (points[i][x], points[i][y]),
                    xytext=(dx * 72 / fig.dpi, dy * 72 / fig.dpi), textcoords="offset points",
                    fontsize=fontsize, va="bottom",
                    arrowprops={"arrowstyle": "-", "lw": 0.4, "alpha": 0.5} if moved else None)