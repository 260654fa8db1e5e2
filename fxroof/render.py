"""Text renderers over plain rows: units and tables. The analysis never formats numbers."""
from __future__ import annotations

import textwrap
from typing import Optional

from tabulate import tabulate

from fxroof.units import op_unit, seconds, si

def _work_label(macs: bool) -> tuple[str, str]:
    return ("macs", "MAC") if macs else ("flops", "FLOP")


def node_table(records: list[dict], macs: bool = False) -> str:
    field, unit = _work_label(macs)
    has_time = any(r.get("time_s") is not None for r in records)
    has_roof = any(r.get("fraction_of_roof") is not None for r in records)
    headers = ["node", "layer type", "module", "phase", "output shape", unit + "s", "bytes",
               "FLOP/byte"] + (["time"] if has_time else []) + (["% of roof"] if has_roof else [])
    rows = []
    for r in records:
        row = [r["name"], r["layer_type"], r["module"] or "(root)", r["phase"],
               "x".join(map(str, r["shape"])) if r["shape"] else "-",
               si(r[field], unit), si(r["bytes"], "B"),
               f"{r['intensity']:.3g}" if r["intensity"] is not None else "-"]
        if has_time:
            row.append(seconds(r.get("time_s")))
        if has_roof:
            fraction = r.get("fraction_of_roof")
            row.append(f"{100 * fraction:.0f}%" if fraction is not None else "-")
        rows.append(row)
    return tabulate(rows, headers=headers, disable_numparse=True)


def breakdown_table(rows: list[dict], title: str, macs: bool = False) -> str:
    field, unit = _work_label(macs)
    has_time = any("time_s" in r for r in rows)
    headers = [title, "nodes", unit + "s", f"% {unit}s", "bytes", "% bytes", "FLOP/byte"]
    if has_time:
        headers += ["time", "% time"]
    body = []
    for r in rows:
        line = [r["key"], r["nodes"], si(r[field], unit), f"{100 * r[field + '_share']:.1f}",
                si(r["bytes"], "B"), f"{100 * r['bytes_share']:.1f}",
                f"{r['intensity']:.3g}" if r["intensity"] is not None else "-"]
        if has_time:
            line += [seconds(r.get("time_s")), f"{100 * r.get('time_share', 0):.1f}"]
        body.append(line)
    return tabulate(body, headers=headers, disable_numparse=True)


def totals_lines(totals: dict, macs: bool = False, nodes: str = "ATen nodes") -> str:
    field, unit = _work_label(macs)
    lines = []
    for phase in ("forward", "backward", "optimizer", "overall"):
        t = totals.get(phase)
        if t is None or (phase == "overall" and "backward" not in totals):
            continue
        lines.append(f"{phase:>9}: {si(t[field], unit)}, {si(t['bytes'], 'B')} moved "
                     f"({si(t['bytes_read'], 'B')} read, {si(t['bytes_written'], 'B')} written), "
                     f"{t['nodes']} {nodes}")
    return "\n".join(lines)


def memory_lines(memory: dict) -> str:
    order = [("parameter_bytes", "parameters"), ("buffer_bytes", "buffers"),
             ("input_bytes", "inputs"), ("activation_bytes", "activations (forward)"),
             ("saved_for_backward_bytes", "saved for backward"),
             ("gradient_bytes", "gradients"), ("optimizer_state_bytes", "optimizer state"),
             ("peak_bytes", "peak live")]
    parts = [f"{label} {si(memory[key], 'B')}" for key, label in order if memory.get(key)]
    return "   memory: " + ", ".join(parts)


def layout_copies_line(copy_bytes: int, total_bytes: int, weights_each_call: bool,
                       device: str = "cpu") -> str:
    """What a compiled view's layout copies (kernels that compute nothing) add to its bytes;
    ``weights_each_call``: unfrozen with convolutions, where Inductor converts every
    convolution weight on every call (on a CPU, to oneDNN's layout; on CUDA, channels-last)."""
    if not copy_bytes:
        return ""
    line = (f"   copies: {si(copy_bytes, 'B')} of the {si(total_bytes, 'B')} are layout copies "
            "(kernels that only lay a tensor out anew")
    if not weights_each_call:
        return line + ")"
    line += "; unfrozen, every convolution weight is converted to channels-last on every call"
    if device == "cuda":  # fxroof's --freeze is the CPU's recipe (fxroof.analysis)
        return line + ": weights kept channels-last, --memory-format channels_last, are not)"
    return line + ": --freeze converts the weights once, at compile time)"


# the compiled view's FLOPs are its ATen nodes' (each counted once), the eager graph's
# within this share but for what Inductor folds away (frozen batch norms) or never computes
OUTSIDE_REGIONS_SHARE = 0.02


def outside_regions_line(compiled_flops: int, eager_flops: Optional[int]) -> str:
    """What of the eager step the compiled view does not hold: the ops that run eagerly at
    Dynamo's graph breaks, between its regions ("" where the two agree)."""
    if not eager_flops or compiled_flops >= (1 - OUTSIDE_REGIONS_SHARE) * eager_flops:
        return ""
    return (f"  outside: {si(eager_flops - compiled_flops, 'FLOP')} of the eager step's "
            f"{si(eager_flops, 'FLOP')} run eagerly at Dynamo's graph breaks, between its "
            "regions, and are not in this view (nor its time): see where with "
            "torch._dynamo.explain")


def between_regions_line(eager: list[dict], eager_flops: Optional[int]) -> str:
    """The eager step's ops a compiled view holds because no Dynamo region traced their
    modules (fxroof.between_regions; "" where there are none)."""
    if not eager:
        return ""
    flops = sum(r["flops"] for r in eager)
    return (f" eager between regions: {len(eager)} ATen nodes ({si(flops, 'FLOP')} of the "
            f"eager step's {si(eager_flops or 0, 'FLOP')}) run eagerly at Dynamo's graph "
            "breaks, in modules no region traced, and are priced as eager ops (their rule "
            "has no 'inductor'); see where with torch._dynamo.explain")


def coverage_line(coverage: dict) -> str:
    missing = coverage["default_rule_ops"]
    head = f" coverage: {coverage['costed_nodes']}/{coverage['nodes']} ATen nodes have a cost rule"
    if not missing:
        return head + "; no op fell to the default (bytes-only) rule."
    listed = ", ".join(f"{op} ({n})" for op, n in sorted(missing.items(), key=lambda kv: -kv[1]))
    return head + f"; default bytes-only rule (0 FLOPs) used for: {listed}"


# Nodes summing to more than this times the eager step on a GPU: the device waited for the
# host (an H200's host issued a node in 13-23 us, longer than a bf16 kernel of
# vit_b_16 at b32, whose nodes then summed to 3.3x the eager step)
HOST_BOUND_RATIO = 1.5


def timing_lines(timing: dict) -> str:
    lines = [f"   timing: {timing['device']}, median of {timing['repeats']} runs after "
             f"{timing['warmup']} warm-up; timer overhead {seconds(timing['overhead_s'])}"
             " per node" + (" (subtracted)" if timing["device"] == "cpu" else "")]
    for phase, total in timing["interpreted_s"].items():
        eager = timing["eager_s"].get(phase)
        ratio = timing["ratio"].get(phase)
        lines.append(f"{phase:>9}: sum of nodes {seconds(total)}, eager {seconds(eager)}"
                     + (f" (ratio {ratio:.2f})" if ratio else ""))
    phases = timing["interpreted_s"]
    if phases.get("backward") and phases.get("forward"):
        lines.append(f" backward:forward time {phases['backward'] / phases['forward']:.2f} "
                     "(sum of nodes)")
    starved = max((r for r in timing["ratio"].values() if r), default=0.0)
    if timing["device"].startswith("cuda") and starved > HOST_BOUND_RATIO:
        lines.append(textwrap.fill(
            f"note: the nodes sum to {starved:.1f}x the eager step: run one by one (the host "
            f"spends {seconds(timing['overhead_s'])} a node), the GPU waited for the host, "
            "and each node's time holds that wait. A larger batch gives the kernels' own "
            "times.", width=96, initial_indent=" " * 5, subsequent_indent=" " * 11))
    return "\n".join(lines)


def where_table(rows: list[dict]) -> str:
    headers = ["node", "layer type", "module", "phase", "time", "roof time", "of roof", "bound"]
    body = [[r["name"], r["layer_type"], r["module"] or "(root)", r["phase"],
             seconds(r["time_s"]), seconds(r["ideal_s"]),
             f"{100 * r['fraction_of_roof']:.0f}%" if r["fraction_of_roof"] is not None else "-",
             r["bound"]] for r in rows]
    return tabulate(body, headers=headers, disable_numparse=True)


def prediction_table(rows: list[dict]) -> str:
    headers = ["chip", "forward", "backward", "total", "p10..p90", "waits for host",
               "page faults", "roof", "time model", "bound", "FLOP/byte", "fits memory"]
    body = []
    for r in rows:
        p, total = r["prediction"], r["prediction"]["overall"]
        body.append([r["chip"].name, seconds(p.get("forward", {}).get("predicted_s")),
                     seconds(p.get("backward", {}).get("predicted_s")),
                     seconds(total["predicted_s"]),
                     f"{seconds(total['low_s'])}..{seconds(total['high_s'])}"
                     if total["model"] == "calibrated" else "-",
                     _share(total.get("host_wait_s"), total["predicted_s"]),
                     _share(total.get("faults_s"), total["predicted_s"]),
                     seconds(total["ideal_s"]), total["model"], total["bound"],
                     f"{total['intensity']:.3g}" if total["intensity"] else "-",
                     "yes" if r["fits"] else "no"])
    return tabulate(body, headers=headers, disable_numparse=True)


def token_rate_table(rows: list[dict], tokens: int) -> str:
    """A language model's step in tokens per second on each chip (rows as
    prediction_table's): the ``tokens`` it takes (a decode step's new ones) over its
    predicted time, the band's edges reversed (the slow edge is the fewer tokens), and over
    its roof time."""
    body = []
    for r in rows:
        total = r["prediction"]["overall"]
        band = f"{_rate(tokens, total['high_s'])}..{_rate(tokens, total['low_s'])}" \
            if total["model"] == "calibrated" else "-"
        body.append([r["chip"].name, seconds(total["predicted_s"]),
                     _rate(tokens, total["predicted_s"]), band,
                     _rate(tokens, total["ideal_s"])])
    return tabulate(body, headers=["chip", "step", "tokens/s", "p10..p90", "at the roof"],
                    disable_numparse=True)


def _rate(tokens: int, step_s) -> str:
    """Tokens per second to 3 significant digits ('26.6', '4,530'), '-' where the step has
    no time."""
    if not step_s:
        return "-"
    rate = float(f"{tokens / step_s:.3g}")
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


# The columns of time_parts_table: prediction.TIME_PARTS, as a reader asks about them
PART_HEADERS = {"roof_s": "roof", "fitted_rates_s": "below roof (fitted rates)",
                "launch_bound_s": "launch-bound kernels", "extra_work_s": "uncounted work",
                "fixed_cost_s": "per-op fixed costs"}


def time_parts_table(rows: list[dict]) -> str:
    """Where each chip's predicted step goes: each part of prediction.TIME_PARTS as a share of
    the step's predicted time (rows as prediction_table's, calibrated ones)."""
    body = []
    for r in rows:
        total = r["prediction"]["overall"]
        body.append([r["chip"].name, seconds(total["predicted_s"])]
                    + [_signed_share(total["parts"][part], total["predicted_s"])
                       for part in PART_HEADERS])
    return tabulate(body, headers=["chip", "total", *PART_HEADERS.values()],
                    disable_numparse=True)


def _signed_share(part: float, whole: float) -> str:
    """'41%' of a predicted time, '-3%' for a part below zero, '0%' for none."""
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _share(part, whole) -> str:
    """'41%' of a predicted time, '-' where there is none."""
    return _signed_share(part, whole) if part else "-"


COMPACT_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")  # fp64 in --wide


def _best_peak(chip, dtype: str):
    """The chip's best dense peak for a dtype: its matrix engine's where it has one."""
    values = [chip.peaks[k] for k in (dtype, f"{dtype}_matrix") if k in chip.peaks]
    return max(values) if values else None


def chips_table(chips, wide: bool = False) -> str:
    """One row per chip. Compact (fits 100 columns): id, class, the best dense peak per
    dtype, bandwidth and memory; ``wide``: the name and every peak key as the chip lists it."""
    if wide:
        dtypes = sorted({d for c in chips for d in c.peaks})
        headers = ["id", "name", "class"] + [f"{d} ({op_unit(d)}/s)" for d in dtypes] + [
            "bandwidth", "memory"]
        body = [[c.id, c.name, c.cls] + [si(c.peaks[d], "") if d in c.peaks else "-"
                                         for d in dtypes]
                + [si(c.bandwidth, "B/s"), si(c.capacity, "B") if c.capacity else "-"]
                for c in chips]
        return tabulate(body, headers=headers, disable_numparse=True)
    dtypes = [d for d in COMPACT_DTYPES if any(_best_peak(c, d) for c in chips)]
    headers = ["id", "class"] + list(dtypes) + ["B/s", "memory"]
    body = [[c.id, c.cls] + [si(_best_peak(c, d), "") if _best_peak(c, d) else "-"
                             for d in dtypes]
            + [si(c.bandwidth, ""), si(c.capacity, "B") if c.capacity else "-"] for c in chips]
    return (tabulate(body, headers=headers, disable_numparse=True)
            + "\nPeaks: dense FLOP/s (int8: OP/s), the matrix engine's where the chip has one."
              "\nB/s: memory bandwidth. --wide: the names, fp64 and every peak as listed.\n"
              "`fxroof chips show ID`: one chip, with its sources.")


def chip_details(chip, time_model: str = "", multiprocessors: str = "") -> str:
    """Everything fxroof knows about one chip, one fact per line, sources last;
    ``time_model``: where its shipped time-model parameters come from, in words;
    ``multiprocessors``: a GPU's SMs and clock as the time model reads them."""
    lines = [f"{chip.id}: {chip.name}", f"  class: {chip.cls}"
             + (f", vendor {chip.vendor}" if chip.vendor else "")]
    if chip.capacity or chip.memory:
        lines.append("  memory: " + ", ".join(filter(None, [
            si(chip.capacity, "B") if chip.capacity else "", chip.memory or ""])))
    lines.append(f"  bandwidth: {si(chip.bandwidth, 'B/s')}")
    if chip.tdp:
        lines.append(f"  TDP: {chip.tdp:g} W")
    if multiprocessors:
        lines.append(f"  multiprocessors: {multiprocessors}")
    lines.append("  dense peaks:")
    for key, value in chip.peaks.items():
        lines.append(f"    {key}: {si(value, op_unit(key) + '/s')} ({chip.units.get(key, '')} "
                     f"engine; ridge at {value / chip.bandwidth:.3g} {op_unit(key)}/byte)")
    if chip.sparse:
        lines.append("  sparse (never used as roofs): " + ", ".join(
            f"{k} {si(v, op_unit(k) + '/s')}" for k, v in chip.sparse.items()))
    if chip.op_overhead_s:
        lines.append(f"  per-op overhead (measured): {seconds(chip.op_overhead_s)}")
    if chip.calibration:
        lines.append("  time model: calibrated for " + ", ".join(chip.calibration))
    elif time_model:
        lines.append(f"  time model: {time_model}")
    lines.append("  sources:")
    lines += [f"    - {source}" for source in chip.sources]
    return "\n".join(lines)


def versus_table(rows: list[dict]) -> str:
    body = [[r["what"], si(r["measured"], ""), si(r["datasheet"], ""),
             f"{100 * r['fraction']:.0f}%"] for r in rows]
    return tabulate(body, headers=["roof", "measured", "datasheet", "measured / datasheet"],
                    disable_numparse=True)
