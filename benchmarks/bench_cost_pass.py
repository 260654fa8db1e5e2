"""Speed of the cost pass against PyTorch's own FLOP counter, measured in one process.

Target (issue 2): fxroof.analyze of resnet50 forward+backward at batch 256 in at most 3x the
time FlopCounterMode takes to count the same step under FakeTensorMode. Both sides build the
model on the meta device and run on fake tensors; both are warmed up once, then the median of
--repeats runs is compared. Prints one JSON line per run.

    python benchmarks/bench_cost_pass.py [--model resnet50] [--batch 256] [--repeats 5]
"""
import argparse
import json
import statistics
import time

import torch
import torchvision
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

import fxroof

TARGET_RATIO = 3.0


def flop_counter_step(name: str, batch: int) -> int:
    fake_mode = FakeTensorMode()
    with torch.device("meta"):
        model = torchvision.models.get_model(name)

    def fake(t):
        with fake_mode:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")

    model = model._apply(fake)
    with fake_mode, FlopCounterMode(display=False) as counter:
        x = torch.empty(batch, 3, 224, 224)
        model(x).sum().backward()
    return counter.get_total_flops()


def fxroof_step(name: str, batch: int) -> int:
    return fxroof.analyze(name, batch=batch, backward=True).totals()["overall"]["flops"]


def timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    flop_counter_step(args.model, args.batch), fxroof_step(args.model, args.batch)  # warm-up
    ours, theirs = [], []
    for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits both
        theirs.append(timed(flop_counter_step, args.model, args.batch))
        ours.append(timed(fxroof_step, args.model, args.batch))
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(json.dumps({
        "benchmark": "cost_pass_vs_flop_counter", "model": args.model, "batch": args.batch,
        "repeats": args.repeats, "fxroof_median_s": round(statistics.median(ours), 4),
        "flop_counter_median_s": round(statistics.median(theirs), 4),
        "ratio": round(ratio, 2), "target_ratio": TARGET_RATIO, "met": ratio <= TARGET_RATIO}))


if __name__ == "__main__":
    main()
