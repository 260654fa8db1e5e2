"""The host's own time per op of an eager step, from torch.profiler's CPU-side events.

    python benchmarks/host_ops.py record --out host.json [--device cuda] [--models ...]
                                  [--batch 1] [--precision fp32 bf16] [--force]
    python benchmarks/host_ops.py summary host.json

A small batch's GPU step is the host's: the device waits while Python and PyTorch issue each
op. The time model prices that host cost per op with the classes' ``t0``; whether an
autocast cast (``aten::_to_copy`` issued inside another op's autocast kernel, in C++) costs
the host what an op called from Python does, whole steps cannot tell (benchmarks/README.md,
"An autocast cast's host cost"). This records it directly.

``record`` (the measurement wants CUDA; cpu only checks the script) runs ``--steps``
inference steps of each model under ``torch.profiler`` (CPU activity only: its CUDA
activity would add its own host work) after ``--warmup`` unprofiled ones, and keeps every
CPU event of the last step: name, start and end (us) and its parent's index. The step's
wall time without the profiler is kept beside it, since the profiler's own cost per event
(about a microsecond) inflates each op a little.

``summary`` reads such a file and prints, per model and precision, the profiler's own cost
an event and, with it taken off, the host cost (us) of an op Python called and of a cast
autocast issued inside one (host_costs); and, where a model has both precisions, bf16's
extra step time per cast against an fp32 op's share of its step.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from collections import defaultdict

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import (  # noqa: E402
    read_recorded as recorded, record_and_summary_parser, script_main)
from fxroof.device import Stopwatch, check_device  # noqa: E402
from fxroof.files import check_writable, write_json  # noqa: E402
from fxroof.models import build_model, default_inputs  # noqa: E402
from fxroof.validate import positive_int_arg  # noqa: E402

PRECISIONS = ("fp32", "bf16")
CAST = "aten::_to_copy"
MAX_FILE_CHARS = 64 << 20  # a recorded file of four models is about 1.4 MB


def _step(module, x, precision: str):
    def step():
        with torch.inference_mode(), torch.autocast(x.device.type, dtype=torch.bfloat16,
                                                     enabled=precision == "bf16"):
            module(x)
    return step


def _events(prof) -> list[dict]:
    """Every CPU event, in start order, with its parent's index (None at the top)."""
    found = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU),
                   key=lambda e: e.time_range.start)
    index = {id(e): i for i, e in enumerate(found)}
    return [{"name": e.name, "start_us": e.time_range.start, "end_us": e.time_range.end,
             "parent": index.get(id(e.cpu_parent)) if e.cpu_parent is not None else None}
            for e in found]


def record_one(name: str, dev: torch.device, precision: str, batch: int, args) -> dict:
    module = build_model(name, device="cpu").to(dev).eval()
    (meta,), _ = default_inputs(name, module, batch, None)
    step = _step(module, torch.randn(meta.shape, device=dev), precision)
    for _ in range(args.warmup):
        step()
    watch = Stopwatch(dev)
    wall = statistics.median(watch.time(step) for _ in range(args.steps))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    return {"model": name, "precision": precision, "batch": batch, "wall_s": wall,
            "events": _events(prof)}


def record(args) -> int:
    dev = check_device(args.device)
    check_writable(args.out, overwrite=args.force)
    rows = []
    for name in args.models:
        for precision in args.precision:
            row = record_one(name, dev, precision, args.batch, args)
            print(f"{name} {precision} b{args.batch}: {row['wall_s'] * 1e3:.2f} ms, "
                  f"{len(row['events'])} events", file=sys.stderr, flush=True)
            rows.append(row)
    write_json(args.out, {"benchmark": "host_ops", "device": str(dev),
                          "torch": torch.__version__, "runs": rows}, overwrite=args.force)
    return 0


# Top-level ops that launch no kernel: a view's host cost is not an op's
VIEW_OPS = frozenset({"aten::view", "aten::reshape", "aten::flatten", "aten::permute",
                      "aten::transpose", "aten::t", "aten::expand", "aten::select",
                      "aten::slice", "aten::squeeze", "aten::unsqueeze", "aten::unflatten",
                      "aten::chunk", "aten::split", "aten::contiguous", "aten::alias",
                      "aten::detach", "aten::dropout"})


def host_costs(events: list[dict], wall_s: float) -> dict:
    """What a recorded step says of its host (us): the profiler's own cost per event (the
    profiled span of the top-level ops over the unprofiled step, spread over their events);
    with it taken off each event, an op's host cost -- the median non-view top-level op,
    its nested casts taken off, plus the median gap between top-level ops (Python) -- and
    an autocast cast's (an outermost ``aten::_to_copy`` inside a top-level op)."""
    children = defaultdict(list)
    for j, e in enumerate(events):
        if e["parent"] is not None:
            children[e["parent"]].append(j)

    def aten_ancestor(j):
        i = events[j]["parent"]
        while i is not None and not events[i]["name"].startswith("aten::"):
            i = events[i]["parent"]
        return i

    def count(j):
        return 1 + sum(count(c) for c in children[j])

    def casts_in(j):
        return [c for k in children[j] for c in ([k] if events[k]["name"] == CAST
                                                 else casts_in(k))]
    top = [j for j, e in enumerate(events)
           if e["name"].startswith("aten::") and aten_ancestor(j) is None]
    span = max(events[j]["end_us"] for j in top) - events[top[0]]["start_us"]
    overhead = max(span - wall_s * 1e6, 0.0) / sum(count(j) for j in top)

    def own(j):
        return events[j]["end_us"] - events[j]["start_us"] - overhead * count(j)
    ops = [j for j in top if events[j]["name"] not in VIEW_OPS | {CAST}]
    casts = [c for j in top for c in casts_in(j)]
    gaps = [events[b]["start_us"] - events[a]["end_us"] for a, b in zip(top, top[1:])]
    op_us = statistics.median(own(j) - sum(own(c) for c in casts_in(j)) for j in ops) + \
        (statistics.median(gaps) if gaps else 0.0)
    return {"ops": len(ops), "casts": len(casts), "overhead_us": overhead, "op_us": op_us,
            "cast_us": statistics.median(own(c) for c in casts) if casts else None,
            "wall_per_op_us": wall_s * 1e6 / len(ops)}


def _check_events(events: list, run: int) -> None:
    """ValueError unless every event has a name, a start and end (us) and a parent that is
    an earlier event's index or None -- what host_costs reads."""
    for j, e in enumerate(events):
        parent = e.get("parent") if isinstance(e, dict) else -1
        if not (isinstance(e, dict) and isinstance(e.get("name"), str)
                and all(isinstance(e.get(k), (int, float)) for k in ("start_us", "end_us"))
                and (parent is None or (isinstance(parent, int) and 0 <= parent < j))):
            raise ValueError(f"run {run}'s event {j} is not a named span with an earlier "
                             "parent or none")


def _check_runs(runs: list) -> None:
    for i, run in enumerate(runs):
        lacking = [k for k in ("model", "precision", "batch", "wall_s", "events") if k not in run]
        if lacking:
            raise ValueError(f"run {i} lacks {', '.join(lacking)}")
        _check_events(run["events"], i)


def read_recorded(path: str) -> dict:
    """The runs a `record` file holds, or a clear error naming what is wrong with it."""
    return recorded(path, "host_ops", "host_ops.py record --out",
                    "a file of recorded host events", _check_runs, MAX_FILE_CHARS)


def summary(args) -> int:
    found = read_recorded(args.file)
    print("model precision batch | step ms | ops, casts | profiler us/event | "
          "op us | cast us | cast / op")
    costs = {}
    for run in found["runs"]:
        c = costs[run["model"], run["batch"], run["precision"]] = \
            host_costs(run["events"], run["wall_s"])
        cast = "-" if c["cast_us"] is None else f"{c['cast_us']:.1f} | " \
            f"{c['cast_us'] / c['op_us']:.2f}"
        print(f"{run['model']} {run['precision']} b{run['batch']} | "
              f"{run['wall_s'] * 1e3:.2f} | {c['ops']}, {c['casts']} | "
              f"{c['overhead_us']:.2f} | {c['op_us']:.1f} | {cast}")
    for (model, batch, precision), bf16 in costs.items():
        fp32 = costs.get((model, batch, "fp32"))
        if precision == "bf16" and fp32 and bf16["casts"]:
            extra = (bf16["wall_per_op_us"] * bf16["ops"] -
                     fp32["wall_per_op_us"] * fp32["ops"]) / bf16["casts"]
            print(f"{model} b{batch}: bf16's extra step time per cast {extra:.1f} us, "
                  f"{extra / fp32['wall_per_op_us']:.2f} of an fp32 op's share of its step")
    return 0


def main(argv=None) -> int:
    parser, _, r = record_and_summary_parser(__doc__, "profile eager steps' host events",
                                             "per-op host times of a recorded file")
    r.add_argument("--models", nargs="+", default=["resnet50", "convnext_tiny", "vit_b_16",
                                                    "mobilenet_v2"])
    r.add_argument("--batch", type=positive_int_arg, default=1)
    r.add_argument("--precision", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    r.add_argument("--warmup", type=positive_int_arg, default=5)
    r.add_argument("--steps", type=positive_int_arg, default=10)
    args = parser.parse_args(argv)
    return record(args) if args.command == "record" else summary(args)


if __name__ == "__main__":
    script_main(main, __file__)
