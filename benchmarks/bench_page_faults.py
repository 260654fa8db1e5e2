"""Replayed page faults (fxroof.page_faults) against the kernel's count, on this CPU.

    python benchmarks/bench_page_faults.py [--models ...] [--batch 1 8 32] [--processes 3]
                                           [--train] [--json r.json [--force]]

For every (model, batch): an eager inference forward of the torchvision model (or with
--train, a training step: forward and backward) runs in ``--processes`` processes of its
own (the steady state a user's loop reaches: five calls, the mean minor-fault count of
calls 3-5 from getrusage, times 4096-byte pages; the median over the processes, and their
range: the count differs from one process to the next, e.g. mobilenet_v2 b8 183-335 MB
over five), and fxroof's analysis of the same step gives the bytes its allocator replay
faults in and those the isolated-node rule (outputs and reorder buffers of 32 MiB or more)
gives. Prints a line per point and, per
batch, the totals and the median absolute error of each; results in benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import script_main  # noqa: E402

from fxroof import analyze, heap, hidden_bytes, page_faults  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import check_writable, write_json  # noqa: E402
from fxroof.study import DEFAULT_MODELS  # noqa: E402

# Runs in a fresh interpreter: the model's step five times, the faults of each call -- an
# inference forward, or (train) a training step: forward, then autograd's backward to every
# parameter, everything the step made dropped before the next, as the study's eager step.
CHILD = """
import json, resource, sys, warnings
warnings.filterwarnings("ignore")
import torch
from fxroof.models import build_model, default_inputs
model, batch, train = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "train"
module = build_model(model, device="cpu").train(train)
(args, kwargs) = default_inputs(model, module, batch, None)
args = [torch.randn(a.shape) for a in args]
params = [p for p in module.parameters() if p.requires_grad]

def step():
    if not train:
        with torch.inference_mode():
            module(*args, **kwargs)
        return
    outs = [o for o in torch.utils._pytree.tree_leaves(module(*args, **kwargs))
            if isinstance(o, torch.Tensor) and o.requires_grad]
    torch.autograd.grad(outs, params, [torch.randn_like(o) for o in outs], allow_unused=True)

faults = []
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) * 4096)
print(json.dumps(faults))
"""


PREDICTED = ("replayed_bytes", "unpinned_bytes", "rule_bytes")


def measured_faults(model: str, batch: int, processes: int, train: bool) -> list[float]:
    """Bytes of minor faults per step in the steady state of each of ``processes`` fresh
    processes."""
    found = []
    for _ in range(processes):
        done = subprocess.run([sys.executable, "-c", CHILD, model, str(batch),
                               "train" if train else "infer"], cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise FxroofError(f"measuring {model} at batch {batch} failed in its own process "
                              f"({last}); check that it runs eagerly on this machine.")
        per_call = json.loads(done.stdout.strip().splitlines()[-1])
        found.append(statistics.mean(per_call[2:]))
    return found


def predicted_faults(model: str, batch: int, train: bool) -> tuple[float, float, float]:
    """(replayed, replayed without the first backward's pin, rule) bytes faulted per step,
    from the analysis."""
    graph = analyze(model, batch=batch, backward=train)
    records = graph.records()
    replayed = sum(r["faulted_bytes"] for r in records)
    events, _ = page_faults.step_events(graph.capture)
    unpinned = sum(heap.steady_faults(e for e in events if e[0] != "pin").values())
    rule = sum(hidden_bytes.fresh_bytes(r) + hidden_bytes.layout_bytes(r)[1] for r in records)
    return replayed, unpinned, rule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--train", action="store_true",
                        help="a training step (forward and backward), not an inference forward")
    parser.add_argument("--json", help="write the points here")
    parser.add_argument("--force", action="store_true", help="overwrite --json if it exists")
    args = parser.parse_args()
    if args.processes < 1:
        parser.error("--processes must be 1 or more")
    if args.json:
        check_writable(args.json, overwrite=args.force)  # before minutes of measuring
    points = []
    for batch in args.batch:
        for model in args.models:
            # first: names a bad model clearly
            replayed, unpinned, rule = predicted_faults(model, batch, args.train)
            each = measured_faults(model, batch, args.processes, args.train)
            measured = statistics.median(each)
            points.append({"model": model, "batch": batch, "train": args.train,
                           "measured_bytes": measured,
                           "measured_range": [min(each), max(each)],
                           "replayed_bytes": replayed, "unpinned_bytes": unpinned,
                           "rule_bytes": rule})
            print(f"{model:20s} b{batch:<3d} measured {measured / 1e6:9.1f} MB "
                  f"({min(each) / 1e6:.0f}-{max(each) / 1e6:.0f})   replayed "
                  f"{replayed / 1e6:9.1f} MB   unpinned {unpinned / 1e6:9.1f} MB   rule "
                  f"{rule / 1e6:9.1f} MB", flush=True)
    for batch in args.batch:
        found = [p for p in points if p["batch"] == batch]
        totals = {k: sum(p[k] for p in found) / 1e6 for k in ("measured_bytes", *PREDICTED)}
        errors = {k: statistics.median(abs(p[k] - p["measured_bytes"]) for p in found) / 1e6
                  for k in PREDICTED}
        print(f"b{batch}: measured {totals['measured_bytes']:.0f} MB; " + "; ".join(
            f"{k.split('_')[0]} {totals[k]:.0f} MB (median |error| {errors[k]:.1f} MB)"
            for k in PREDICTED))
    if args.json:
        write_json(args.json, points, overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
