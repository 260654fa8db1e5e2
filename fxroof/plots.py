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
import textwrap
from typing import Optional

import matplotlib
import matplotlib.lines
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import (EngFormatter, FixedLocator, FuncFormatter, LogLocator,
                               NullFormatter)

from fxroof.chips import Chip
from fxroof.errors import FxroofError
from fxroof.files import atomic_path, check_writable
from fxroof.roofline import roof_key, tf32_convolution_roof
from fxroof.units import op_unit, si

STYLE = {"figure.figsize": (10, 6.5), "figure.dpi": 110, "font.size": 9,
         "axes.grid": True, "grid.alpha": 0.3, "axes.titlesize": 11}
INTENSITY = np.logspace(-2, 4, 400)  # FLOP/byte


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


SERIES_MARKERS = "osD^vP*Xph"
SERIES_LINES = ("-", "--", ":", "-.")


def series_style(i: int) -> dict:
    """Line colour, marker and dash of the i-th series: ten colours, and with each new ten a
    new dash, and a marker per series, so no two of 40 series look alike."""
    return {"color": colormap("tab10")(i % 10), "marker": SERIES_MARKERS[i % 10],
            "ls": SERIES_LINES[(i // 10) % len(SERIES_LINES)], "markersize": 5}


def check_figure(path: str, overwrite: bool) -> None:
    """Refuse, before any work, a figure path fxroof would not or could not write."""
    check_writable(path, overwrite, ".png")  # first: it also refuses what is no path at all
    figure_format(path)


def save(fig, path: str, overwrite: bool) -> None:
    """Write the figure atomically, in the format its extension names."""
    check_figure(path, overwrite)
    for ax in fig.axes:
        label_log_axes(ax)
    fig.tight_layout()
    with atomic_path(path) as partial:
        fig.savefig(partial, bbox_inches="tight", format=figure_format(path))


def label_log_axes(ax) -> None:
    """Every log axis carries numbers: where its range holds fewer than three powers of ten,
    ticks at 1, 2 and 5 per decade (1, 2, 3, 5 below one decade) are labelled, in the axis's
    own format (an EngFormatter keeps its unit) or as plain numbers."""
    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if axis.get_scale() != "log" or min(limits) <= 0 \
                or isinstance(axis.get_major_locator(), FixedLocator):  # ticks chosen: batches
            continue
        low, high = sorted(limits)
        decades = np.floor(np.log10(high)) - np.ceil(np.log10(low)) + 1
        if decades >= 3:
            continue
        span = np.log10(high / low)
        axis.set_major_locator(LogLocator(subs=(1, 2, 5) if span > 1 else (1, 2, 3, 5)))
        if not isinstance(axis.get_major_formatter(), EngFormatter):
            axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(NullFormatter())


def plain_roofline_numbers(ax) -> None:
    """A roofline's axes in plain numbers: intensity as 0.1, 1, 1000 and performance as
    100 G, not 10^11 or 1 x 10^11. matplotlib's 10^x labels are mathtext too, whose parsing
    was a third of the drawing of the all-chips figure (2.1 s -> 1.5 s, and a study draws a
    dozen)."""
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_major_formatter(EngFormatter(sep=" "))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(NullFormatter())


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


# One look per chip class (marker), colours cycling within a class: with 12 GPUs and 8 ASICs
# on one figure, colour alone repeats and a reader cannot tell two roofs apart.
CLASS_MARKERS = {"gpu": "o", "asic": "s", "soc": "^", "cpu": "D", "fpga": "P"}
CLASS_TITLES = {"gpu": "GPUs", "asic": "ASICs", "soc": "SoCs", "cpu": "CPUs", "fpga": "FPGAs"}


def draw_roofs(ax, chips: list[Chip], dtype: str) -> dict:
    """One roof per chip: min(peak, bandwidth x intensity), the chip's class shown by its
    marker (where more than ten roofs share the axes) and the chip by its colour (ten per
    class, then the same ten with hollow markers). For fp32 on a GPU whose convolutions
    PyTorch runs in TF32 (cuDNN's default), the TF32 tensor-core roof that fxroof's
    predictions use for convolutions is drawn too, dashed and thinner. Returns chip id -> colour."""
    colours, seen = {}, {}
    cmap = colormap("tab10")
    drawn = [c for c in chips if roof_key(c, dtype) is not None]
    marked = len(drawn) > 10  # a few roofs need no markers, and points are not mistaken
    for chip in drawn:
        key = roof_key(chip, dtype)
        index = seen[chip.cls] = seen.get(chip.cls, -1) + 1
        colour = cmap(index % 10)
        roof = np.minimum(chip.peaks[key], chip.bandwidth * INTENSITY)
        (line,) = ax.plot(INTENSITY, roof, color=colour, lw=1.6,
                          marker=CLASS_MARKERS.get(chip.cls, "o") if marked else None,
                          markevery=(index * 11 % 80, 80),
                          markersize=4.5, markerfacecolor=colour if index < 10 else "white",
                          label=f"{chip.name} [{key}, {si(chip.bandwidth, 'B/s')}]")
        line.fxroof_class = chip.cls  # read by the grouped legend
        colours[chip.id] = colour
        if tf32_convolution_roof(chip, dtype):
            (tf32,) = ax.plot(INTENSITY, np.minimum(chip.peaks["tf32"],
                                                    chip.bandwidth * INTENSITY),
                              color=colour, lw=1.0, ls="--",
                              label="dashed: TF32 tensor-core roof (fp32 convolutions)")
            tf32.fxroof_class = "tf32"
    return colours


def missing_note(chips: list[Chip], dtype: str) -> str:
    """Which chips a figure leaves out because they publish no peak in its dtype, or ''."""
    left_out = [c.name for c in chips if roof_key(c, dtype) is None]
    if not left_out:
        return ""
    return (f"Not drawn, no published {dtype} peak: " + ", ".join(left_out)
            + f" (see chips-{'bf16' if dtype == 'fp32' else 'fp32'} or `fxroof chips list`).")


LEGEND_DROP_FONT_SIZES = 4.6  # the tick labels' and the axis label's lines, in legend font sizes


def grouped_legend(ax, ncol: int = 2, title: Optional[str] = None, **kwargs):
    """The axes' legend below the plot (it never narrows the axes), roofs grouped under a
    heading per chip class, one entry for all the dashed TF32 roofs, points last."""
    handles, labels = ax.get_legend_handles_labels()
    blank = matplotlib.lines.Line2D([], [], linestyle="none")
    classes = {getattr(h, "fxroof_class", None) for h in handles} & set(CLASS_MARKERS)
    ordered, names = [], []
    for cls in (*CLASS_MARKERS, "tf32", None):
        members = [(h, lab) for h, lab in zip(handles, labels, strict=True)
                   if getattr(h, "fxroof_class", None) == cls]
        if cls == "tf32":
            members = members[:1]
        elif cls is not None and members and len(classes) > 1:
            ordered.append(blank)
            names.append(f"$\\bf{{{CLASS_TITLES[cls]}}}$")
        for handle, label in members:
            ordered.append(handle)
            names.append(label)
    # hung below the x axis's label by a distance in font sizes, not in axes fractions
    # (-0.11 of a 7.5-inch figure's axes put the first row over the label)
    return ax.legend(ordered, names, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                     borderaxespad=LEGEND_DROP_FONT_SIZES,
                     ncol=ncol, fontsize=7.5, frameon=False, title=title, **kwargs)


def plot_chips(chips: list[Chip], path: str, dtype: str = "fp32", overwrite: bool = False,
               title: Optional[str] = None) -> str:
    plotted = [c for c in chips if roof_key(c, dtype)]
    if not plotted:
        raise FxroofError(f"No chip lists a {dtype} peak; choose another --dtype.")
    op = op_unit(dtype)
    fig, ax = new_axes(title or f"Rooflines, dense {dtype} peaks (matrix engine where the chip "
                                 "has one)", xlabel=f"operational intensity ({op}/byte)",
                       ylabel=f"attainable performance ({op}/s)", size=(11, 7.5))
    draw_roofs(ax, plotted, dtype)
    plain_roofline_numbers(ax)
    note = missing_note(chips, dtype)
    if note:
        ax.set_title("")
        ax.set_title(textwrap.fill(note, 160), fontsize=7.5, loc="left", pad=4, alpha=0.8)
        fig.suptitle(title or f"Rooflines, dense {dtype} peaks (matrix engine where the chip "
                              "has one)", fontsize=11)
    grouped_legend(ax, ncol=2 if len(plotted) > 6 else 1)
    save(fig, path, overwrite)
    return path


def plot_chips_by_class(chips: list[Chip], path: str, dtype: str = "fp32",
                        overwrite: bool = False) -> list[str]:
    """The all-chip plot at ``path`` plus one per class beside it (name-<class>.ext). Every
    path is checked before the first figure is written."""
    root, ext = os.path.splitext(path)
    classes = sorted({c.cls for c in chips if roof_key(c, dtype)})
    paths = [path] + [f"{root}-{cls}{ext}" for cls in classes]
    for each in paths:
        check_figure(each, overwrite)
    written = [plot_chips(chips, path, dtype, overwrite)]
    for cls, each in zip(classes, paths[1:], strict=True):
        members = [c for c in chips if c.cls == cls and roof_key(c, dtype)]
        written.append(plot_chips(members, each, dtype, overwrite,
                                  title=f"{cls.upper()} rooflines, dense {dtype} peaks"))
    return written


def plot_points(points: list[dict], chips: list[Chip], path: str, dtype: str = "fp32",
                overwrite: bool = False, title: str = "", sizes: Optional[list] = None,
                note: str = "intensity = FLOPs / bytes moved (unfused eager traffic model)"
                ) -> str:
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
        # largest first, so a small bubble is drawn over a large one, never under it
        members = sorted((i for i, p in enumerate(points) if p["group"] == group),
                         key=lambda i: -sizes[i])
        ax.scatter([points[i]["intensity"] for i in members],
                   [points[i]["flops_per_s"] for i in members], s=[sizes[i] for i in members],
                   color=cmap(gi), alpha=0.7, edgecolor="black", lw=0.6, label=str(group),
                   zorder=3)
    _zoom_to(ax, points, chips, dtype)
    plain_roofline_numbers(ax)
    legend = grouped_legend(ax, ncol=2, title=note)
    legend.get_title().set_fontsize(7.5)
    for handle in legend.legend_handles:  # bubble sizes are data, not legend entries
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([36])
    place_labels(ax, merge_coincident(ax, points), radii=[(s ** 0.5) / 2 for s in sizes])
    save(fig, path, overwrite)
    return path


def merge_coincident(ax, points: list[dict], pixels: float = 3.0) -> list[dict]:
    """One label for points drawn at the same spot ("resnet50 b64, b256 (t4)"), the others
    labelled ''; two labels for one spot need a leader line each, and the lines cross."""
    ax.figure.canvas.draw()
    centres = [ax.transData.transform((p["intensity"], p["flops_per_s"])) for p in points]
    merged = [dict(p) for p in points]
    for i, p in enumerate(merged):
        if not p["label"]:
            continue
        twins = [j for j in range(i + 1, len(points)) if merged[j]["label"]
                 and np.hypot(*(centres[j] - centres[i])) <= pixels]
        if twins:
            p["label"] = join_labels([p["label"]] + [merged[j]["label"] for j in twins])
            for j in twins:
                merged[j]["label"] = ""
    return merged


# A shared label names at most this many points, then counts the rest: by node, a layer
# type's forty batch norms can sit at one spot, and their forty names made a label wider
# than the figure (7,400 pixels for mobilenet_v2 at batch 32 in fp16).
MAX_NAMES_IN_A_LABEL = 4


def join_labels(labels: list[str]) -> str:
    """"a b64 (t4)" and "a b256 (t4)" -> "a b64, b256 (t4)": the words all labels share at
    the start and the end, once, and what differs between them, comma-separated -- the
    first MAX_NAMES_IN_A_LABEL - 1 of them and "+N more" where there are more."""
    words = [label.split() for label in labels]
    head = 0
    while all(len(w) > head + 1 and w[head] == words[0][head] for w in words):
        head += 1
    tail = 0
    while all(len(w) > head + tail + 1 and w[-1 - tail] == words[0][-1 - tail] for w in words):
        tail += 1
    middles = list(dict.fromkeys(" ".join(w[head:len(w) - tail]) for w in words))
    if len(middles) > MAX_NAMES_IN_A_LABEL:
        shown = MAX_NAMES_IN_A_LABEL - 1
        middles = middles[:shown] + [f"+{len(middles) - shown} more"]
    return " ".join(words[0][:head] + [", ".join(middles)] + words[0][len(words[0]) - tail:])


def shortened_label(label: str) -> str:
    """A label join_labels cut to names and a count, cut to its first name and the count of
    the others ("a, b, c, +9 more (t4)" -> "a, +11 more (t4)"), for a point with no room
    for the whole; any other label as it is."""
    names = label.split(", ")
    more = re.fullmatch(r"\+(\d+) more(.*)", names[-1])
    if more is None or len(names) < 3:
        return label
    return f"{names[0]}, +{len(names) - 2 + int(more.group(1))} more{more.group(2)}"


def _zoom_to(ax, points: list[dict], chips: list[Chip], dtype: str) -> None:
    """Show the points' decade range and the roofs' ridges and peaks, not 6 empty decades."""
    keys = [(c, roof_key(c, dtype)) for c in chips]
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

    def spot_for(px, py, width, gap):  # the nearest free offset, None where none is
        for step in range(40):
            reach = step * line_h
            candidates = [(gap, -line_h / 2 + reach), (gap, -line_h / 2 - reach),
                          (-gap - width, -line_h / 2 + reach),
                          (-gap - width, -line_h / 2 - reach)]
            spot = next(((dx, dy) for dx, dy in candidates
                         if free((px + dx, py + dy, width, line_h))), None)
            if spot is not None:
                return spot
        return None

    order = sorted(range(len(points)), key=lambda i: (points[i][x], points[i][y]))
    for i in order:
        (px, py), label = centres[i], points[i]["label"]
        if not label:  # merged into a coincident point's label
            continue
        gap = clear[i] + 2
        spot = spot_for(px, py, char_w * len(label), gap)
        if spot is None and shortened_label(label) != label:  # too wide for any free spot
            label = shortened_label(label)
            spot = spot_for(px, py, char_w * len(label), gap)
        width = char_w * len(label)
        dx, dy = spot if spot is not None else (gap, -line_h / 2)
        taken.append((px + dx, py + dy, width, line_h))
        moved = abs(dy + line_h / 2) > line_h
        ax.annotate(label, (points[i][x], points[i][y]),
                    xytext=(dx * 72 / fig.dpi, dy * 72 / fig.dpi), textcoords="offset points",
                    fontsize=fontsize, va="bottom",
                    arrowprops={"arrowstyle": "-", "lw": 0.4, "alpha": 0.5} if moved else None)