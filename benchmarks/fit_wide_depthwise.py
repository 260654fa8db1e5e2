"""Fit the share of the FP32 peak at which cuDNN runs a channels-last FP16 depthwise
convolution with a filter wider than 7 x 7 (time_model.WIDE_FILTER_DEPTHWISE_COMPUTE), and
check it on steps it was not fitted on.

    python benchmarks/fit_wide_depthwise.py [--json r.json [--force]]

The measurements: timm's benchmark results on an RTX 4090 (github.com/huggingface/
pytorch-image-models, results/; FP16 autocast, cuDNN's search on, eval under no_grad, batch
as the file gives it):
* fitted on: benchmark-infer-amp-nhwc-pt240-cu124-rtx4090.csv (PyTorch 2.4, model and input
  channels-last), ConvMixer-1536/20 and ConvMixer-1024/20, whose 9 x 9 depthwise kernels
  hold most of their step;
* checked on: the compiled ConvMixer-1024/20 of benchmark-infer-amp-nchw-pt291-cu128-4090-
  dynamo.csv (PyTorch 2.9.1; Inductor makes its convolutions channels-last), and
  ConvMixer-768/32 channels-last (7 x 7 filters, which keep the dense class's rate).

For each fitted step the share that makes fxroof's prediction equal the measurement is
solved for (the rest of the step priced as always), and the shipped share is their mean.
Skipped where timm (an optional extra) is not installed.
"""
from __future__ import annotations

import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scipy.optimize import brentq  # noqa: E402

from benchmarks import parsed_output_arguments, report, script_main, timm_missing  # noqa: E402
from fxroof import analyze, time_model  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.prediction import predict  # noqa: E402
from fxroof.roofline import cudnn_search  # noqa: E402

CHIP = "rtx_4090"
SOURCE = ("timm (huggingface/pytorch-image-models) results/: benchmark-infer-amp-nhwc-pt240-"
          "cu124-rtx4090.csv; benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv")
# (model, batch, memory format, compiled, infer_step_time ms)
FITTED = [("convmixer_1536_20", 512, "channels_last", False, 3787.319),
          ("convmixer_1024_20_ks9_p14", 512, "channels_last", False, 557.51)]
CHECKED = [("convmixer_1024_20_ks9_p14", 1024, "contiguous", True, 976.451),
           ("convmixer_768_32", 512, "channels_last", False, 613.517)]


def _records(model: str, batch: int, memory_format: str, compiled: bool) -> list:
    with cudnn_search():
        return analyze(f"timm:{model}", input_shapes=[(batch, 3, 224, 224)], device="cuda",
                       chip=CHIP, amp="fp16", compiled=compiled,
                       memory_format=memory_format).records()


def predicted_s(records: list, share) -> float:
    """The step's predicted forward time (s) with the wide filters at ``share`` (None: at
    the dense class's rate, as a 7 x 7 one is)."""
    kept = time_model.WIDE_FILTER_DEPTHWISE_COMPUTE
    time_model.WIDE_FILTER_DEPTHWISE_COMPUTE = share
    try:
        with cudnn_search():
            return predict(records, get_chip(CHIP))["forward"]["predicted_s"]
    finally:
        time_model.WIDE_FILTER_DEPTHWISE_COMPUTE = kept


def solved_share(records: list, measured_s: float) -> float:
    """The share at which the prediction is the measurement (it falls as the share rises)."""
    return brentq(lambda share: predicted_s(records, share) - measured_s, 1e-4, 1.0,
                  xtol=1e-6)


def main(argv=None) -> int:
    args = parsed_output_arguments(__doc__, argv)
    if timm_missing("fit_wide_depthwise"):
        return 0
    points, records = [], []
    for rows, fitted in ((FITTED, True), (CHECKED, False)):
        for model, batch, layout, compiled, ms in rows:
            records.append(_records(model, batch, layout, compiled))
            points.append({"model": model, "batch": batch, "memory_format": layout,
                           "compiled": compiled, "measured_s": ms / 1e3, "fitted_on": fitted})
    shares = [solved_share(r, p["measured_s"]) for p, r in zip(points, records)
              if p["fitted_on"]]
    share = round(statistics.mean(shares), 4)
    for p, r in zip(points, records):
        p["predicted_s"] = predicted_s(r, share)
        p["class_rate_s"] = predicted_s(r, None)
        print(f"{p['model']:27s} b{p['batch']:<5d} {p['memory_format']:13s} "
              f"compiled={p['compiled']!s:5s} measured {p['measured_s'] * 1e3:7.1f} ms  "
              f"predicted x{p['predicted_s'] / p['measured_s']:.2f}"
              f" (at the class's rate x{p['class_rate_s'] / p['measured_s']:.2f})"
              f"{'  (fitted on)' if p['fitted_on'] else ''}", file=sys.stderr)
    result = {"benchmark": "fit_wide_depthwise", "reference": SOURCE, "chip": CHIP,
              "solved_shares": [round(s, 4) for s in shares], "share": share,
              "shipped": time_model.WIDE_FILTER_DEPTHWISE_COMPUTE}
    report(result, args, points)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
