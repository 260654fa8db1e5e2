"""The default study: its wall time, and how well each predictor ranks the measured latency.

Runs `fxroof study` with its defaults (or reads a finished study with --report-only) and
prints one JSON line: wall time, and Spearman rho between measured latency and fxroof's
roofline-predicted latency, FLOPs and parameter count -- over all (model, batch) points and per
batch size. Goal (issue 5): rho(predicted) >= 0.95 and above both baselines.

    python benchmarks/bench_study.py --out /tmp/study [--device cpu] [--report-only]
"""
import argparse
import json
import os
import time

from fxroof.study import StudyConfig, run_study


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="study folder (new, or one to resume)")
    parser.add_argument("--device", nargs="+", default=["cpu"])
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    run_study(StudyConfig(devices=args.device), args.out, report_only=args.report_only)
    seconds = time.perf_counter() - start
    with open(os.path.join(args.out, "data", "spearman.json")) as f:
        correlations = json.load(f)
    result = {"benchmark": "study", "wall_s": round(seconds, 1)}
    for device in args.device:
        latency = f"latency ({device})"
        for scope, matrix in correlations.items():
            if matrix["rho"] is None or latency not in matrix["variables"]:
                continue
            names = matrix["variables"]
            row = matrix["rho"][names.index(latency)]
            result[f"{device} {scope} (n={matrix['n']})"] = {
                "predicted": round(row[names.index(f"fxroof predicted ({device})")], 3),
                "flops": round(row[names.index("FLOPs")], 3),
                "parameters": round(row[names.index("parameters")], 3)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
