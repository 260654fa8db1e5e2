"""The study report: data files, figures, and one document rendered twice (report.md and
report.html) from the same list of blocks, so the two never disagree."""
from __future__ import annotations

import csv
import datetime
import html
import os
import re

from tabulate import tabulate

from fxroof import interactive
from fxroof.chips import load_chips
from fxroof.files import atomic
from fxroof.measure import datasheet_chip, versus_datasheet
from fxroof.units import si
from fxroof.study import figures
from fxroof.study.cache import write_json
from fxroof.study.findings import findings
from fxroof.study.tables import MIN_SPEARMAN_POINTS, StudyTables, spearman
from fxroof.target import CACHING

# A block is (kind, payload): ("h", text), ("p", text), ("list", [text]), ("img", path),
# ("table", (headers, rows)).


def _csv(path: str, rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r if k != "samples_s"))
    with atomic(path, newline="") as f:  # a rerun interrupted leaves the last whole table
        writer = csv.DictWriter(f, keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_data(t: StudyTables, folder: str) -> dict:
    os.makedirs(folder, exist_ok=True)
    correlations = {"all": spearman(t), **{f"batch {b}": spearman(t, b) for b in t.batches()}}
    write_json(os.path.join(folder, "spearman.json"), correlations)
    write_json(os.path.join(folder, "chips-measured.json"),
               {d: c.as_record() for d, c in t.chips.items()})
    write_json(os.path.join(folder, "failures.json"), t.failures)
    paths = {"models": _csv(os.path.join(folder, "models.csv"), t.rows),
             "training": _csv(os.path.join(folder, "training.csv"), t.train),
             "layer_types": _csv(os.path.join(folder, "layer-types.csv"), t.layer_types)}
    if t.compiled:
        paths["compiled"] = _csv(os.path.join(folder, "compiled.csv"), t.compiled)
    return paths


def _fmt(value, unit=""):
    if value is None:
        return "-"
    return si(value, unit) if unit else f"{value:.3g}"


def _model_table(t: StudyTables, device: str):
    headers = ["model", "batch", "FLOPs", "params", "weights", "activations", "peak mem",
               "moved", "FLOP/B", "latency", "predicted", "error", "% of roof", "bound"]
    rows = [[r["model"], r["batch"], _fmt(r["flops"], "FLOP"), _fmt(r["parameters"]),
             _fmt(r["weight_bytes"], "B"), _fmt(r["activation_bytes"], "B"),
             _fmt(r["peak_bytes"], "B"), _fmt(r["bytes"], "B"), f"{r['intensity']:.1f}",
             _fmt(r["latency_s"], "s"), _fmt(r["predicted_s"], "s"),
             "-" if r["prediction_error"] is None else f"{100 * r['prediction_error']:+.0f}%",
             "-" if r["pct_of_attainable"] is None else f"{r['pct_of_attainable']:.0f}%",
             r["bound"]] for r in t.rows if r["device"] == device]
    return headers, rows


def _train_table(t: StudyTables):
    headers = ["model", "batch", "device", "fw FLOPs", "bw FLOPs", "bw:fw FLOPs", "fw time",
               "bw time", "bw:fw time", "fw predicted", "bw predicted"]
    rows = [[r["model"], r["batch"], r["device"], _fmt(r["forward_flops"], "FLOP"),
             _fmt(r["backward_flops"], "FLOP"), f"{r['flops_ratio']:.2f}",
             _fmt(r["forward_s"], "s"), _fmt(r["backward_s"], "s"), f"{r['time_ratio']:.2f}",
             _fmt(r["forward_predicted_s"], "s"), _fmt(r["backward_predicted_s"], "s")]
            for r in t.train]
    return headers, rows


def _versus_blocks(t: StudyTables) -> list:
    """Measured roofs beside the datasheet of the same device, where the database has it."""
    out = []
    for device, chip in t.chips.items():
        sheet = datasheet_chip(chip.name, load_chips())
        if sheet is not None:
            rows = versus_datasheet(chip, sheet)
            out += [("p", f"{device}: measured vs the datasheet of {sheet.name}."),
                    ("table", (["roof", "measured", "datasheet", "measured / datasheet"],
                               [[r["what"], _fmt(r["measured"]), _fmt(r["datasheet"]),
                                 f"{100 * r['fraction']:.0f}%"] for r in rows]))]
    return out


def _compiled_blocks(t: StudyTables, images: dict, rel) -> list:
    """Section 6, when the study compiled its models: eager vs compiled, predicted and
    measured."""
    if not t.compiled:
        return []
    headers = ["model", "batch", "kernels", "eager bytes", "compiled bytes", "compiled / eager",
               "predicted speed-up", "latency eager", "latency compiled", "measured speed-up"]
    rows = [[r["model"], r["batch"], r["kernels"], _fmt(r["eager_bytes"], "B"),
             _fmt(r["compiled_bytes"], "B"), f"{r['compiled_bytes'] / r['eager_bytes']:.2f}",
             f"{r['predicted_speedup']:.2f}", _fmt(r["latency_s"], "s"),
             _fmt(r["compiled_latency_s"], "s"),
             "-" if r["measured_speedup"] is None else f"{r['measured_speedup']:.2f}"]
            for r in t.compiled]
    from scipy.stats import spearmanr  # 1.6 s to import: not on every command's start

    ranks = []
    for batch in sorted({r["batch"] for r in t.compiled}):
        mine = [r for r in t.compiled if r["batch"] == batch and r["measured_speedup"]]
        if len(mine) >= MIN_SPEARMAN_POINTS:
            rho = spearmanr([r["predicted_speedup"] for r in mine],
                            [r["measured_speedup"] for r in mine]).statistic
            ranks.append(f"batch {batch}: Spearman rho {rho:.2f} over {len(mine)} models")
    return [("h", "6. Eager vs compiled (torch.compile, CPU)"),
            ("p", "The compiled view (fxroof --compiled) lowers each model with Inductor and "
                  "costs its kernels: bytes are each kernel's buffers, so fused chains move "
                  "their intermediates no more; the predicted time is the calibrated time model "
                  "on the measured roof, per kernel. Measured: torch.compile(model), median "
                  "after its compile and warm-up. "
                  + ("Both are frozen (--freeze: Inductor's freezing, its CPU inference "
                     "recipe: weights constant, batch norms folded, oneDNN weights prepacked "
                     "once). " if t.config.freeze else "")
                  + "Speed-up = eager / compiled time. "
                  + ("; ".join(ranks) + "." if ranks else
                     f"(Rank correlations need {MIN_SPEARMAN_POINTS} models per batch.)")),
            ("table", (headers, rows)), ("img", rel(images["compiled"]))]


def _processes(c) -> str:
    """Where the study measured, and under which host allocator (its page faults priced)."""
    where = "in a fresh process per model and batch" if c.fresh_process else \
        "in the study's own process"
    if c.rounds > 1:
        where += (f", in {c.rounds} rounds over all the points (each latency and training "
                  "step its median round's)")
    allocator = "a caching allocator (tcmalloc: no page faults once warm)" \
        if c.allocator == CACHING else "glibc's malloc (its page faults priced)"
    search = ", with cuDNN's engine search on (--cudnn-benchmark: GPU convolutions timed " \
        "and priced as torch.backends.cudnn.benchmark = True runs them)" \
        if c.cudnn_benchmark else ""
    return f"{where}, under {allocator}{search}"


def blocks(t: StudyTables, images: dict, data: dict, root: str) -> list:
    rel = lambda p: os.path.relpath(p, root)  # noqa: E731
    c = t.config
    out = [("h", "fxroof study"),
           ("p", f"Generated {datetime.datetime.now().isoformat(timespec='seconds')}. "
                 f"{len(c.models)} models; devices: " + "; ".join(
                     f"{d} at batch {', '.join(map(str, c.batches_for(d)))} (training at "
                     f"{', '.join(map(str, c.train_batches_for(d)))})" for d in c.devices)
                 + f"; {c.warmup} warm-up and {c.repeats} timed runs each, medians reported, "
                 + _processes(c) + ". "
                 "FLOPs count a multiply-add as 2; bytes are the unfused eager traffic of every "
                 "ATen op; model intensity is total FLOPs / total bytes. Data: "
                 + ", ".join(f"[{k}]({rel(v)})" for k, v in data.items()) + "."),
           ("h", "Findings"), ("list", findings(t)),
           ("h", "1. Chips"),
           ("p", "Dense fp32, bf16 and fp16 roofs (the matrix engine where a chip has "
                 "one; dashed: the TF32 roof PyTorch uses for GPU convolutions; a chip appears "
                 "only in the dtypes it lists), with this study's measured roofs: "
                 + "; ".join(f"{ch.name}: " + ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in
                                                        ch.peaks.items())
                             + f", {si(ch.bandwidth, 'B/s')}" for ch in t.chips.values()) + ".")]
    out += _versus_blocks(t)
    out += [("img", rel(p)) for p in images["chips"]]
    out += [("h", "2. Model compute and memory"), ("img", rel(images["costs"]))]
    for device in t.chips:
        out += [("p", f"Table on {device} (predicted: fxroof's roofline on the measured roof; "
                      "% of roof: predicted / measured latency)."),
                ("table", _model_table(t, device))]
    out += [("img", rel(p)) for p in images["models_roofline"]]
    if images["interactive"]:
        out += [("p", "Interactive: hover a point for its model, batch, FLOPs, bytes, time and "
                      "% of roof; the menus show attainable or achieved positions, one batch "
                      "size or all (report.html only).")]
        out += [("html", div) for div in images["interactive"]]
    out += [("h", "3. Latency"), ("img", rel(images["latency_flops"])),
            ("img", rel(images["latency_params"])), ("img", rel(images["throughput"])),
            ("img", rel(images["spearman"])),
            ("h", "4. Achieved performance")]
    out += [("img", rel(p)) for p in images["achieved"]]
    out += [("h", "5. Training"), ("table", _train_table(t)), ("img", rel(images["training"]))]
    out += [("img", rel(p)) for p in images["pies"]]
    out += _compiled_blocks(t, images, rel)
    if t.failures:
        out += [("h", "Failures"), ("table", (["model", "batch", "device", "phase", "error"],
                                              [[f["model"], f["batch"], f["device"], f["phase"],
                                                f["error"]] for f in t.failures]))]
    return out


def to_markdown(blocks_: list) -> str:
    lines = []
    for kind, payload in blocks_:
        if kind == "h":
            lines.append(("# " if payload == "fxroof study" else "## ") + payload)
        elif kind == "p":
            lines.append(payload)
        elif kind == "list":
            lines.append("\n".join(f"- {item}" for item in payload))
        elif kind == "img":
            lines.append(f"![{os.path.basename(payload)}]({payload})")
        elif kind == "html":  # interactive figures live in report.html only
            continue
        elif kind == "table":
            lines.append(tabulate(payload[1], headers=payload[0], tablefmt="github"))
        lines.append("")
    return "\n".join(lines)


def _inline(text: str) -> str:
    """Markdown links [x](y) as HTML anchors, everything else escaped."""
    escaped = html.escape(text)
    return re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', escaped)


def to_html(blocks_: list) -> str:
    body = []
    for kind, payload in blocks_:
        if kind == "h":
            tag = "h1" if payload == "fxroof study" else "h2"
            body.append(f"<{tag}>{html.escape(payload)}</{tag}>")
        elif kind == "p":
            body.append(f"<p>{_inline(payload)}</p>")
        elif kind == "list":
            body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in payload) + "</ul>")
        elif kind == "img":
            body.append(f'<p><img src="{html.escape(payload)}" alt="{html.escape(payload)}" '
                        'style="max-width:100%"></p>')
        elif kind == "table":
            body.append(tabulate(payload[1], headers=payload[0], tablefmt="html"))
        elif kind == "html":  # produced by fxroof.interactive, not user text
            body.append(payload)
    script = (f'<script src="{interactive.PLOTLY_JS}"></script>'
              if any(kind == "html" for kind, _ in blocks_) else "")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
             "padding:2px 6px;text-align:right}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>fxroof study</title>"
            f"<style>{style}</style>{script}</head><body>{''.join(body)}</body></html>")


def write_report(t: StudyTables, root: str, shipped_chips: list) -> dict:
    fig_dir, data_dir = os.path.join(root, "figures"), os.path.join(root, "data")
    os.makedirs(fig_dir, exist_ok=True)
    data = write_data(t, data_dir)
    images = {
        "chips": figures.chip_rooflines(t, shipped_chips, fig_dir),
        "costs": figures.model_costs(t, fig_dir),
        "models_roofline": figures.models_on_roofline(t, fig_dir, achieved=False),
        "latency_flops": figures.latency_scatter(t, "flops", "FLOPs (FLOP)", fig_dir),
        "latency_params": figures.latency_scatter(t, "parameters", "parameters (count)",
                                                  fig_dir),
        "throughput": figures.throughput(t, fig_dir),
        "spearman": figures.correlation_matrices(t, fig_dir),
        "achieved": figures.models_on_roofline(t, fig_dir, achieved=True),
        "training": figures.training(t, fig_dir),
        "pies": figures.layer_pies(t, fig_dir),
        "interactive": figures.interactive_rooflines(t),
        "compiled": figures.compiled_speedups(t, fig_dir) if t.compiled else None,
    }
    if images["interactive"]:
        interactive.write_plotly_js(root)
    document = blocks(t, images, data, root)
    paths = {"md": os.path.join(root, "report.md"), "html": os.path.join(root, "report.html")}
    with atomic(paths["md"]) as f:
        f.write(to_markdown(document))
    with atomic(paths["html"]) as f:
        f.write(to_html(document))
    return paths
