"""Analysis cost at LLM scale, on fake tensors: time and peak RSS vs layer count.

Targets (issue 6): Llama-2-7B shape (32 layers, hidden 4096, seq 2048, batch 1, bf16)
forward+backward in <= 8 s and <= 1.5 GB peak RSS; time linear in node count. Each size runs
in a fresh process (so RSS is that run's own); the time is that of fxroof.analyze alone,
imports excluded. Prints one JSON line per size and a linear fit of seconds per node.

    python benchmarks/bench_scale.py [--layers 2 4 8 16 32]
"""
import argparse
import json
import subprocess
import sys

import numpy as np

CHILD = """
import json, resource, sys, time, torch, fxroof
layers = int(sys.argv[1])
start = time.perf_counter()
g = fxroof.analyze("hf:llama", hf_config={"num_hidden_layers": layers}, seq_len=2048, batch=1,
                   dtype=torch.bfloat16, backward=True)
seconds = time.perf_counter() - start
print(json.dumps({"layers": layers, "nodes": len(g.records()), "analyze_s": round(seconds, 3),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                  "tflop": round(g.totals()["overall"]["flops"] / 1e12, 2),
                  "default_rule_ops": g.coverage()["default_rule_ops"]}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    args = parser.parse_args()
    rows = []
    for layers in args.layers:
        out = subprocess.run([sys.executable, "-c", CHILD, str(layers)], capture_output=True,
                             text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps({"benchmark": "llama_scale", **rows[-1]}))
    nodes = np.array([r["nodes"] for r in rows], dtype=float)
    seconds = np.array([r["analyze_s"] for r in rows])
    slope, intercept = np.polyfit(nodes, seconds, 1)
    residual = float(np.max(np.abs(seconds - (slope * nodes + intercept)) / seconds))
    print(json.dumps({"benchmark": "llama_scale_fit", "us_per_node": round(slope * 1e6, 1),
                      "intercept_s": round(intercept, 3), "max_relative_residual":
                      round(residual, 3)}))


if __name__ == "__main__":
    main()
