"""fxroof's compiled view of a CUDA target against timm's published torch.compile step times
on two GeForce boards, and the speed-up over eager it predicts against the one measured.

    python benchmarks/bench_public_dynamo.py [--json r.json [--force]]

The reference: timm's benchmark results (github.com/huggingface/pytorch-image-models,
results/), written by its benchmark.py with ``--torchcompile`` (``torch.compile(model,
backend="inductor")``, the default mode: no max-autotune, no CUDA graphs), AMP (FP16
autocast), NCHW inputs, ``torch.backends.cudnn.benchmark = True``, eval mode under
``torch.no_grad()``, each step timed from the host with the device synchronised after it:
benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv (PyTorch 2.9.1, an RTX 4090) and
benchmark-infer-amp-nchw-pt291-cu130-5090-dynamo.csv (PyTorch 2.9.1, an RTX 5090), batch
1024 (efficientnet_b3 at 288 ran 512 a step). The eager step times beside them are
bench_public_timm's (the same PyTorch, boards and batch, without torch.compile).

Each point is ``analyze(..., compiled=True)`` on the CUDA target of the board's chip:
Inductor's CUDA lowering read without a GPU (fxroof.gpu_lowering), its kernels priced by the
calibrated time model. The eager and compiled steps of one model on one board share the GPU's
rates, so their ratio -- the speed-up torch.compile buys -- checks what the compiled view
changes (fusion, layouts, no cuDNN transposes) with those rates cancelling. Nothing was
fitted on these files. Skipped where timm (an optional extra) is not installed.
"""
from __future__ import annotations

import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import (parsed_output_arguments, report, script_main,  # noqa: E402
                        timm_missing)
from benchmarks.bench_public_gpu import summary  # noqa: E402
from benchmarks.bench_public_timm import INFERENCE_BATCH, INFERENCE_MS  # noqa: E402
from fxroof import analyze  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.prediction import predict  # noqa: E402
from fxroof.roofline import cudnn_search  # noqa: E402

SOURCE = ("timm (huggingface/pytorch-image-models) results/: benchmark-infer-amp-nchw-pt291-"
          "cu128-4090-dynamo.csv, benchmark-infer-amp-nchw-pt291-cu130-5090-dynamo.csv; eager: "
          "benchmark-infer-amp-nchw-pt291-cu128-4090.csv, "
          "benchmark-infer-amp-nchw-pt291-cu130-5090.csv")
# (model, image size, batch, infer_step_time ms) under torch.compile: the models of
# bench_public_timm's eager tables for the same two boards
COMPILED_MS = {
    "rtx_4090": [
        ("resnet18", 224, 1024, 41.035), ("resnet34", 224, 1024, 69.789),
        ("resnet50", 224, 1024, 127.355), ("resnet101", 224, 1024, 202.773),
        ("resnet152", 224, 1024, 289.071), ("efficientnet_b0", 224, 1024, 94.916),
        ("efficientnet_b3", 288, 512, 156.477), ("mobilenetv2_100", 224, 1024, 62.827),
        ("mobilenetv3_large_100", 224, 1024, 49.401), ("convnext_tiny", 224, 1024, 152.852),
        ("convnext_small", 224, 1024, 257.428), ("convnext_base", 224, 1024, 380.834),
        ("vit_tiny_patch16_224", 224, 1024, 43.182),
        ("vit_small_patch16_224", 224, 1024, 102.905),
        ("vit_base_patch16_224", 224, 1024, 303.329),
        ("swin_tiny_patch4_window7_224", 224, 1024, 203.947),
        ("densenet121", 224, 1024, 164.886), ("inception_v3", 299, 1024, 153.664),
        ("resnext50_32x4d", 224, 1024, 152.307), ("resnext101_32x8d", 224, 1024, 394.97),
        ("wide_resnet50_2", 224, 1024, 218.581), ("vgg16", 224, 1024, 265.786)],
    "rtx_5090": [
        ("resnet18", 224, 1024, 28.719), ("resnet34", 224, 1024, 49.901),
        ("resnet50", 224, 1024, 82.556), ("resnet101", 224, 1024, 135.023),
        ("efficientnet_b0", 224, 1024, 56.135), ("efficientnet_b3", 288, 512, 94.562),
        ("mobilenetv2_100", 224, 1024, 37.096), ("mobilenetv3_large_100", 224, 1024, 29.473),
        ("convnext_tiny", 224, 1024, 107.486), ("convnext_small", 224, 1024, 183.651),
        ("vit_tiny_patch16_224", 224, 1024, 30.834),
        ("vit_small_patch16_224", 224, 1024, 76.163),
        ("vit_base_patch16_224", 224, 1024, 233.832),
        ("swin_tiny_patch4_window7_224", 224, 1024, 139.627),
        ("densenet121", 224, 1024, 100.582), ("inception_v3", 299, 1024, 109.028),
        ("resnext50_32x4d", 224, 1024, 100.383), ("wide_resnet50_2", 224, 1024, 155.019),
        ("vgg11", 224, 1024, 101.97), ("vgg16", 224, 1024, 191.085)],
}


def _forward_s(model: str, size: int, batch: int, chip, compiled: bool) -> tuple:
    """(expected, p10, p90, ideal) seconds of one eval step, as timm's benchmark ran it."""
    with cudnn_search():
        records = analyze(f"timm:{model}", input_shapes=[(batch, 3, size, size)],
                          device="cuda", chip=chip, amp="fp16", compiled=compiled).records()
        p = predict(records, chip)["forward"]
    return p["predicted_s"], p["low_s"], p["high_s"], p["ideal_s"]


def point(chip_id: str, model: str, size: int, batch: int, ms: float) -> dict:
    """One published compiled step against the compiled view's prediction, and the predicted
    eager step at the same batch for the speed-up (the eager one measured at batch 1024,
    scaled per image where the compiled run took another batch)."""
    chip = get_chip(chip_id)
    compiled_s, low_s, high_s, ideal_s = _forward_s(model, size, batch, chip, True)
    eager_s = _forward_s(model, size, batch, chip, False)[0]
    eager_ms = dict((m, t) for m, _, t in INFERENCE_MS[chip_id])[model]
    measured_eager_s = eager_ms / 1e3 * batch / INFERENCE_BATCH
    return {"chip": chip_id, "model": model, "image_size": size, "batch": batch,
            "measured_s": ms / 1e3, "pipelined_s": compiled_s, "low_s": low_s,
            "high_s": high_s, "ideal_s": ideal_s, "predicted_eager_s": eager_s,
            "measured_eager_s": measured_eager_s,
            "measured_speedup": measured_eager_s / (ms / 1e3),
            "predicted_speedup": eager_s / compiled_s}


def speedup_summary(found: list[dict]) -> dict:
    errors = [abs(p["predicted_speedup"] / p["measured_speedup"] - 1) for p in found]
    return {"median_error": round(statistics.median(errors), 3),
            "worst_error": round(max(errors), 3)}


def main(argv=None) -> int:
    args = parsed_output_arguments(__doc__, argv)
    if timm_missing("bench_public_dynamo"):
        return 0
    found = [point(chip, *row) for chip, rows in COMPILED_MS.items() for row in rows]
    for p in found:
        print(f"{p['chip']:9s} {p['model']:29s} b{p['batch']:<5d} compiled measured "
              f"{p['measured_s'] * 1e3:7.1f} ms"
              f"  predicted x{p['pipelined_s'] / p['measured_s']:.2f}"
              f"  speed-up over eager measured {p['measured_speedup']:.2f}"
              f" predicted {p['predicted_speedup']:.2f}", file=sys.stderr)
    result = {"benchmark": "public_dynamo", "reference": SOURCE, "points": len(found),
              **summary(found, ("pipelined", "ideal")), "speedup": speedup_summary(found),
              **{chip: {**summary([p for p in found if p["chip"] == chip],
                                  ("pipelined", "ideal")),
                        "speedup": speedup_summary([p for p in found if p["chip"] == chip])}
                 for chip in COMPILED_MS}}
    report(result, args, found)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
