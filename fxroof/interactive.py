"""Interactive roofline pages: the same roofs and points as fxroof.plots, drawn with Plotly as
HTML, so hovering a point shows what it is and what it costs, and a model's nodes can be
filtered by phase and layer type.

Functions take plain data (chips, point dicts) like plots.py does; nothing here computes a
cost. A page written by ``write_page`` is self-contained (Plotly's JavaScript inline): it opens
from disk with no network. The study's report, which holds several figures, loads one
``plotly.min.js`` written beside it instead (``figure_div`` and ``write_plotly_js``).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs

from fxroof.chips import Chip
from fxroof.errors import FxroofError
from fxroof.files import atomic, check_writable
from fxroof.roofline import roof_key, tf32_convolution_roof
from fxroof.units import si

INTENSITY = np.logspace(-2, 4, 200)  # FLOP/byte
PLOTLY_JS = "plotly.min.js"
COLOURS = qualitative.Dark24
SYMBOLS = ("circle", "diamond", "square", "triangle-up")  # forward, backward, ...
# What a point's hover says; a point dict may leave any of these out.
HOVER = ("label", "chip", "layer_type", "module", "phase", "flops", "bytes", "intensity",
         "time_s", "time_kind", "pct_of_roof")


def is_page(path: str) -> bool:
    return os.path.splitext(str(path))[1].lower() in (".html", ".htm")


def check_page(path: str, overwrite: bool) -> None:
    """Refuse, before any work, a page path fxroof would not or could not write."""
    if not is_page(path):
        raise FxroofError(f"'{path}' is not an .html path; an interactive roofline is a web "
                          "page.")
    check_writable(path, overwrite)


def roof_traces(chips: list[Chip], dtype: str) -> list:
    """One line per chip, min(peak, bandwidth x intensity), with its numbers on hover."""
    traces = []
    for chip in chips:
        key = roof_key(chip, dtype)
        if key is None:
            continue
        roof = np.minimum(chip.peaks[key], chip.bandwidth * INTENSITY)
        traces.append(_roof(chip, key, roof, f"{chip.name} [{key}]", "solid"))
        if tf32_convolution_roof(chip, dtype):
            tf32 = np.minimum(chip.peaks["tf32"], chip.bandwidth * INTENSITY)
            traces.append(_roof(chip, "tf32", tf32, f"{chip.name} [tf32: fp32 convolutions]",
                                "dash"))
    return traces


def _roof(chip: Chip, key: str, values, name: str, dash: str):
    return go.Scatter(
        x=INTENSITY, y=values, mode="lines", name=name, line={"dash": dash},
        legendgroup="roofs", legendgrouptitle_text="roofs", meta={"role": "roof"},
        hovertemplate=f"{chip.name}<br>{key} peak {si(chip.peaks[key], 'FLOP/s')}<br>"
                      f"bandwidth {si(chip.bandwidth, 'B/s')}<br>ridge "
                      f"{chip.peaks[key] / chip.bandwidth:.3g} FLOP/byte<extra></extra>")


def _hover_text(point: dict) -> str:
    """The hover of one point: every field it has, with units."""
    p = point
    lines = [f"<b>{p['label']}</b>"]
    for key, text in (("chip", "on {}"), ("layer_type", "layer {}"), ("module", "module {}"),
                      ("phase", "phase {}")):
        if p.get(key):
            lines.append(text.format(p[key]))
    if p.get("flops") is not None:
        lines.append(f"{si(p['flops'], 'FLOP')}, {si(p['bytes'], 'B')} moved")
    lines.append(f"intensity {p['intensity']:.3g} FLOP/byte")
    lines.append(f"performance {si(p['flops_per_s'], 'FLOP/s')}")
    if p.get("time_s") is not None:
        lines.append(f"time {si(p['time_s'], 's')} ({p.get('time_kind', '')})")
    if p.get("pct_of_roof") is not None:
        lines.append(f"{p['pct_of_roof']:.0f}% of roof")
    return "<br>".join(lines)


def point_traces(points: list[dict], sizes: Optional[list] = None) -> list:
    """One trace per (phase, group) of points, so the legend and the menus filter them; a
    group keeps its colour in every phase, and the phase is the marker's shape."""
    keys = list(dict.fromkeys((p.get("phase", ""), p["group"]) for p in points))
    groups = list(dict.fromkeys(group for _, group in keys))
    symbols = {phase: SYMBOLS[i % len(SYMBOLS)]
               for i, phase in enumerate(dict.fromkeys(phase for phase, _ in keys))}
    traces = []
    for phase, group in keys:
        members = [i for i, p in enumerate(points) if (p.get("phase", ""), p["group"]) == (
            phase, group)]
        size = [max(6.0, (sizes[i] ** 0.5)) if sizes else 9 for i in members]
        traces.append(go.Scatter(
            x=[points[i]["intensity"] for i in members],
            y=[points[i]["flops_per_s"] for i in members], mode="markers",
            name=str(group), legendgroup=phase or "points",
            legendgrouptitle_text=phase or "points",
            marker={"size": size, "opacity": 0.75, "symbol": symbols[phase],
                    "color": COLOURS[groups.index(group) % len(COLOURS)],
                    "line": {"width": 0.6, "color": "black"}},
            text=[_hover_text(points[i]) for i in members],
            hovertemplate="%{text}<extra></extra>",
            meta={"role": "points", "phase": phase, "group": str(group)}))
    return traces


def _menu(traces: list, field: str, label: str, x: float) -> Optional[dict]:
    """A dropdown showing the point traces whose meta[field] is the choice (roofs stay)."""
    choices = sorted({t.meta[field] for t in traces if t.meta["role"] == "points"})
    if len(choices) < 2:
        return None
    visible = lambda keep: [t.meta["role"] == "roof" or keep(t) for t in traces]  # noqa: E731
    buttons = [{"label": f"all {label}s", "method": "restyle",
                "args": ["visible", visible(lambda t: True)]}]
    buttons += [{"label": str(c), "method": "restyle",
                 "args": ["visible", visible(lambda t, c=c: t.meta[field] == c)]}
                for c in choices]
    return {"buttons": buttons, "direction": "down", "x": x, "xanchor": "left", "y": 1.02,
            "yanchor": "bottom", "showactive": True, "name": label}


def figure(points: list[dict], chips: list[Chip], dtype: str, title: str,
           sizes: Optional[list] = None, phase_name: str = "phase") -> go.Figure:
    """Roofs and points on log-log axes; menus filter by phase and by group (layer type or
    batch) where the points have more than one."""
    traces = roof_traces(chips, dtype) + point_traces(points, sizes)
    fig = go.Figure(traces)
    menus = [m for m in (_menu(traces, "phase", phase_name, 0.0),
                         _menu(traces, "group", points[0].get("group_name", "group")
                               if points else "group", 0.18)) if m]
    fig.update_layout(
        title={"text": title, "x": 0.01, "y": 0.97, "yanchor": "top"},
        template="plotly_white", height=700,
        xaxis={"type": "log", "title": "operational intensity (FLOP/byte)",
               "exponentformat": "SI"},
        yaxis={"type": "log", "title": "performance (FLOP/s)", "exponentformat": "SI"},
        legend={"groupclick": "toggleitem"}, updatemenus=menus, hovermode="closest",
        margin={"t": 100})
    return fig


def write_page(fig: go.Figure, path: str, overwrite: bool = False) -> str:
    """A self-contained HTML page (Plotly's JavaScript inline), written atomically."""
    check_page(path, overwrite)
    with atomic(path) as f:
        f.write(fig.to_html(full_html=True, include_plotlyjs=True))
    return path


def figure_div(fig: go.Figure, div_id: str) -> str:
    """The figure as a <div> for a page that loads plotly.min.js itself."""
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id)


def write_plotly_js(folder: str) -> str:
    """Plotly's JavaScript beside a report, for its figure divs (no network needed)."""
    path = os.path.join(folder, PLOTLY_JS)
    with atomic(path) as f:
        f.write(get_plotlyjs())
    return path
