"""Per op class, a GPU's timed nodes against the time model's kernel time on a chip.

    python benchmarks/gpu_classes.py prof.json [prof2.json ...] --chip h200_sxm
                                     [--chips-file F.yaml] [--json out.json] [--force]

Each file is `fxroof profile ... --device cuda --json` output: every node with its
CUDA-event time. Summed per (phase, op class): the measured seconds, the predicted kernel
seconds on ``--chip`` (fxroof.prediction.device_seconds: the node's time without the host's
fixed cost, which a node's events do not hold) and their ratio -- which classes make a
GPU-bound step slower or faster than predicted. Each profile is traced again on fake
tensors to take today's rule names (with_todays_rules): a kept one's may predate a variant
the time model reads, and its nodes are priced as a fresh one's would be. A profile whose
nodes sum to more than render.HOST_BOUND_RATIO times its eager step is refused: there the
events hold the device's wait for the interpreter, not the kernels (use a larger batch). A
CPU's profile is never refused so: its nodes' times are its kernels'.
"""
from __future__ import annotations

import json
import os
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import parsed_chip_arguments, script_main  # noqa: E402
import fxroof  # noqa: E402
from fxroof import op_classes, prediction, time_model  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import write_json  # noqa: E402
from fxroof.render import HOST_BOUND_RATIO  # noqa: E402


def read_profile(path: str) -> dict:
    """A `profile --json` file of a GPU-bound run, or a clear error."""
    try:
        with open(path) as f:
            profile = json.load(f)
        timing, nodes = profile["timing"], profile["nodes"]
        missing = next((f"node {i} lacks '{field}'" for i, node in enumerate(nodes)
                        for field in (*op_classes.RECORD_FIELDS, "phase", "time_s")
                        if field not in node
                        and field not in op_classes.DEFAULTED_RECORD_FIELDS), None)
        if missing:
            raise ValueError(missing)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FxroofError(f"Cannot read '{path}' as a timed profile ({e}): give the file "
                          "`fxroof profile ... --json` wrote.") from None
    ratios = [r for r in timing.get("ratio", {}).values() if r]
    if str(timing["device"]).startswith("cuda") and ratios and max(ratios) > HOST_BOUND_RATIO:
        raise FxroofError(f"'{path}': its nodes sum to {max(ratios):.1f}x the eager step, so "
                          "their times hold the GPU's wait for the host, not its kernels. "
                          "Profile a larger batch.")
    return {"name": profile["model"]["name"], "batch": profile["model"]["batch"],
            "device": timing["device"], "nodes": nodes, "model": profile["model"]}


def with_todays_rules(profile: dict) -> dict:
    """``profile`` with its nodes' rules as today's rules name them: the model traced again
    on fake tensors (fxroof.analyze, for the profiled model, batch, mode, autocast and loss),
    each node taking the rule of the node of its name, op and shape. A kept profile's rules
    are those of the fxroof that took it, which may predate a variant the time model reads
    (ATen's elementwise loops, column reductions, a strided 1x1 convolution). A profile of
    a module built in its own process (its name a class's, not one fxroof can build) is
    read as it is where its rules already name loops or column reductions -- taken by a
    recent fxroof --, else the error says which model could not be built."""
    config = profile["model"]
    # a profile names its optimizer and implementation so: "sgd (foreach)"
    optimizer, _, implementation = (config.get("optimizer") or "").partition(" (")
    try:
        graph = fxroof.analyze(config["name"], batch=config["batch"], device="cuda",
                               amp=config.get("amp"), loss=config.get("loss"),
                               optimizer=optimizer or None,
                               optimizer_impl=implementation.rstrip(")") or None,
                               backward=bool(config.get("backward")), mode=config.get("mode"))
    except FxroofError:
        if any(op_classes.elementwise_loop(r) or op_classes.column_reduction(r)
               for r in profile["nodes"]):
            return profile
        raise
    fresh = {(r["name"], r["op"], tuple(r["shape"] or ())): r["rule"] for r in graph.records()}
    nodes = [{**r, "rule": fresh.get((r["name"], r["op"], tuple(r["shape"] or ())), r["rule"])}
             for r in profile["nodes"]]
    return {**profile, "nodes": nodes}


def read_traced_profile(path: str) -> dict:
    """read_profile's ``path`` through with_todays_rules, an error naming the file."""
    profile = read_profile(path)
    try:
        return with_todays_rules(profile)
    except FxroofError as e:
        raise FxroofError(f"'{path}': tracing the model it profiled again, to name its "
                          f"nodes as today's rules do, failed: {e}") from None


def by_class(nodes: list[dict], chip) -> dict:
    """{(phase, op class): {"nodes", "measured_s", "kernel_s", "ratio"}} over the timed
    nodes that run a kernel."""
    sums: dict = defaultdict(lambda: {"nodes": 0, "measured_s": 0.0, "kernel_s": 0.0})
    for record in nodes:
        op_class = op_classes.op_class_on(record, chip.cls)
        if op_class is None or record.get("time_s") is None:
            continue
        entry = sums[record["phase"], op_class]
        entry["nodes"] += 1
        entry["measured_s"] += record["time_s"]
        entry["kernel_s"] += prediction.device_seconds(time_model.node_time(record, chip))
    return {key: {**entry, "ratio": (entry["measured_s"] / entry["kernel_s"]
                                     if entry["kernel_s"] else None)}
            for key, entry in sums.items()}


def main(argv=None) -> int:
    args, chip = parsed_chip_arguments(__doc__, "profiles",
                                       "`fxroof profile --json` files (a GPU's)", argv)
    result = []
    for path in args.profiles:
        profile = read_traced_profile(path)
        for (phase, op_class), entry in sorted(by_class(profile["nodes"], chip).items(),
                                               key=lambda kv: -kv[1]["measured_s"]):
            result.append({"model": profile["name"], "batch": profile["batch"],
                           "phase": phase, "op_class": op_class, **entry})
            ratio = f"{entry['ratio']:.2f}" if entry["ratio"] is not None else "-"
            print(f"{profile['name']:>18} b{profile['batch']:<4} {phase:>9} {op_class:<20} "
                  f"{entry['nodes']:4d} nodes  measured {entry['measured_s'] * 1e3:8.3f} ms  "
                  f"kernels on {chip.id} {entry['kernel_s'] * 1e3:8.3f} ms  x{ratio}")
    if args.json:
        write_json(args.json, {"chip": chip.id, "classes": result}, overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
