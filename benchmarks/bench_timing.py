"""Timing interpreter: per-node overhead and the sum of node times against the eager step.

Targets (issue 4): interpreter overhead under 20 us per node on the CPU; sum of per-node
medians within +-15% of the eager step on CPU (+-10% on CUDA) for resnet18-class models. Both
sides run in this process on the same inputs. Prints one JSON line.

    python benchmarks/bench_timing.py [--model resnet18] [--batch 8] [--device cpu]
"""
import argparse
import json

import fxroof

OVERHEAD_TARGET_S = 20e-6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    g = fxroof.analyze(args.model, batch=args.batch, backward=True)
    report = g.time(device=args.device, repeats=args.repeats, warmup=args.warmup)
    tolerance = 0.15 if report.device == "cpu" else 0.10
    ratios = {p: round(report.ratio(p), 3) for p in report.interpreted_s}
    print(json.dumps({
        "benchmark": "timing_interpreter", "model": args.model, "batch": args.batch,
        "device": report.device, "nodes": len(g.records()),
        "overhead_us_per_node": round(report.overhead_s * 1e6, 2),
        "overhead_met": report.overhead_s < OVERHEAD_TARGET_S,
        "sum_of_nodes_s": {p: round(v, 4) for p, v in report.interpreted_s.items()},
        "eager_s": {p: round(v, 4) for p, v in report.eager_s.items()},
        "ratio": ratios, "ratio_met": all(abs(r - 1) <= tolerance for r in ratios.values())}))


if __name__ == "__main__":
    main()
