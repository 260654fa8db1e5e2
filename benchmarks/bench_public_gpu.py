"""fxroof's GPU predictions against public whole-model measurements it was never fitted on.

    python benchmarks/bench_public_gpu.py [--json r.json [--force]]

The reference: NVIDIA's DeepLearningExamples, ResNet50 v1.5 for PyTorch (torchvision's
resnet50 is v1.5), README "Inference performance results", measured in the pytorch-21.03
NGC container on a DGX-1 V100 16GB (fxroof chip v100_sxm2) and a T4, FP32 and mixed
precision (fp16 autocast), average latency per batch
(github.com/NVIDIA/DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/
README.md). Their timing is of their own inference loop (cuDNN autotuning on, DALI input
pipeline), not of fxroof's step, so read the errors as an outside check, not as a target.

For each point: fxroof's calibrated prediction (the shipped GPU parameters, the eager step
pipelined, fxroof.pipeline), the plain sum of the nodes' isolated times that the pipeline
replaced, and the ideal roof.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from scipy.stats import spearmanr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import script_main  # noqa: E402
from fxroof import analyze  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.files import check_writable, write_json  # noqa: E402
from fxroof.roofline import node_time, predict  # noqa: E402

SOURCE = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md,"
          " inference latency avg (pytorch-21.03 NGC container)")
# (chip, autocast precision or None for FP32) -> {batch: measured average latency, ms}
RESNET50_LATENCY_MS = {
    ("v100_sxm2", None): {1: 10.37, 2: 10.24, 4: 10.46, 8: 11.5, 16: 16.07, 32: 29.37,
                          64: 55.4, 128: 109.26, 256: 214.48},
    ("v100_sxm2", "fp16"): {1: 12.78, 2: 13.01, 4: 13.41, 8: 13.65, 16: 14.0, 32: 15.84,
                            64: 23.18, 128: 43.55, 256: 84.14},
    ("t4", None): {1: 10.7, 2: 11.26, 4: 12.73, 8: 22.41, 16: 39.77, 32: 77.62, 64: 152.73,
                   128: 309.26, 256: 635.98},
    ("t4", "fp16"): {1: 12.96, 2: 13.18, 4: 12.99, 8: 12.82, 16: 15.8, 32: 29.54, 64: 57.41,
                     128: 114.24, 256: 225.95},
}


def points() -> list[dict]:
    found = []
    for (chip_id, amp), latencies in RESNET50_LATENCY_MS.items():
        chip = get_chip(chip_id)
        for batch, ms in latencies.items():
            records = analyze("resnet50", batch=batch, device="cuda", chip=chip,
                              amp=amp).records()
            p = predict(records, chip)["forward"]
            found.append({"chip": chip_id, "precision": amp or "fp32", "batch": batch,
                          "measured_s": ms / 1e3, "pipelined_s": p["predicted_s"],
                          "low_s": p["low_s"], "high_s": p["high_s"],
                          "summed_s": sum(node_time(r, chip).predicted_s for r in records),
                          "ideal_s": p["ideal_s"]})
    return found


def summary(found: list[dict]) -> dict:
    result = {}
    for model in ("pipelined", "summed", "ideal"):
        errors = sorted(abs(p[f"{model}_s"] / p["measured_s"] - 1) for p in found)
        rho = spearmanr([p[f"{model}_s"] for p in found], [p["measured_s"] for p in found])[0]
        result[model] = {"median_error": round(statistics.median(errors), 3),
                         "p90_error": round(errors[int(0.9 * (len(errors) - 1))], 3),
                         "worst_error": round(errors[-1], 3),
                         "spearman_rho": round(float(rho), 3)}
    result["inside_band"] = round(sum(p["low_s"] <= p["measured_s"] <= p["high_s"]
                                      for p in found) / len(found), 3)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write every point and the summary here")
    parser.add_argument("--force", action="store_true", help="overwrite --json if it exists")
    args = parser.parse_args(argv)
    if args.json:
        check_writable(args.json, overwrite=args.force)
    found = points()
    for p in found:
        print(f"{p['chip']:10s} {p['precision']:5s} b{p['batch']:<4d} measured "
              f"{p['measured_s'] * 1e3:7.2f} ms  pipelined x{p['pipelined_s'] / p['measured_s']:.2f}"
              f"  summed x{p['summed_s'] / p['measured_s']:.2f}"
              f"  ideal x{p['ideal_s'] / p['measured_s']:.2f}", file=sys.stderr)
    result = {"benchmark": "public_gpu", "reference": SOURCE, "points": len(found),
              **summary(found)}
    print(json.dumps(result, indent=1))
    if args.json:
        write_json(args.json, {"summary": result, "points": found}, overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
