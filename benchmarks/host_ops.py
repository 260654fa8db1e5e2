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

``summary`` reads such a file and prints, per model and precision, the top-level ops (those
Python called: no aten parent), the casts autocast issued inside another op, and the median
host time of each, in us.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import script_main  # noqa: E402
from fxroof.device import Stopwatch, check_device  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import check_writable, read_text, write_json  # noqa: E402
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


def _ops_of(events: list[dict]) -> tuple[list[float], list[float], list[float]]:
    """Host time (us) of the top-level aten ops, the casts among them and the casts nested
    inside another aten op (autocast's), in that order."""
    def is_aten(i):
        return i is not None and events[i]["name"].startswith("aten::")

    def has_aten_parent(e):
        i = e["parent"]
        while i is not None:
            if is_aten(i):
                return True
            i = events[i]["parent"]
        return False
    top, top_casts, nested_casts = [], [], []
    for e in events:
        if not e["name"].startswith("aten::"):
            continue
        took = e["end_us"] - e["start_us"]
        if not has_aten_parent(e):
            (top_casts if e["name"] == CAST else top).append(took)
        elif e["name"] == CAST:
            nested_casts.append(took)
    return top, top_casts, nested_casts


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f}" if xs else "-"


def _check_events(events: list, run: int) -> None:
    """ValueError unless every event has a name, a start and end (us) and a parent that is
    an earlier event's index or None -- what _ops_of reads."""
    for j, e in enumerate(events):
        parent = e.get("parent") if isinstance(e, dict) else -1
        if not (isinstance(e, dict) and isinstance(e.get("name"), str)
                and all(isinstance(e.get(k), (int, float)) for k in ("start_us", "end_us"))
                and (parent is None or (isinstance(parent, int) and 0 <= parent < j))):
            raise ValueError(f"run {run}'s event {j} is not a named span with an earlier "
                             "parent or none")


def read_recorded(path: str) -> dict:
    """The runs a `record` file holds, or a clear error naming what is wrong with it."""
    try:
        found = json.loads(read_text(path, MAX_FILE_CHARS, "a host_ops file"))
        if found.get("benchmark") == "host_ops" and isinstance(found.get("runs"), list):
            for i, run in enumerate(found["runs"]):
                lacking = [k for k in ("model", "precision", "batch", "wall_s", "events")
                           if k not in run]
                if lacking:
                    raise ValueError(f"run {i} lacks {', '.join(lacking)}")
                _check_events(run["events"], i)
            return found
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError) as e:
        raise FxroofError(f"Cannot read '{path}' ({e}): give the JSON file that "
                          "`host_ops.py record --out` wrote.") from None
    raise FxroofError(f"'{path}' is not a file of recorded host events: give the JSON file "
                      "that `host_ops.py record --out` wrote.")


def summary(args) -> int:
    found = read_recorded(args.file)
    print("model precision batch | step ms | top-level ops (n, median us) | "
          "autocast casts (n, median us) | ops' share of the step")
    for run in found["runs"]:
        top, top_casts, nested = _ops_of(run["events"])
        share = (sum(top) + sum(top_casts)) / (run["wall_s"] * 1e6)
        print(f"{run['model']} {run['precision']} b{run['batch']} | "
              f"{run['wall_s'] * 1e3:.2f} | {len(top)}, {_median(top)} | "
              f"{len(nested)}, {_median(nested)} | {share:.2f}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    r = actions.add_parser("record", help="profile eager steps' host events")
    r.add_argument("--out", required=True)
    r.add_argument("--device", default="cuda")
    r.add_argument("--models", nargs="+", default=["resnet50", "convnext_tiny", "vit_b_16",
                                                    "mobilenet_v2"])
    r.add_argument("--batch", type=positive_int_arg, default=1)
    r.add_argument("--precision", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    r.add_argument("--warmup", type=positive_int_arg, default=5)
    r.add_argument("--steps", type=positive_int_arg, default=10)
    r.add_argument("--force", action="store_true")
    s = actions.add_parser("summary", help="per-op host times of a recorded file")
    s.add_argument("file")
    args = parser.parse_args(argv)
    return record(args) if args.action == "record" else summary(args)


if __name__ == "__main__":
    script_main(main, __file__)
